#!/usr/bin/env bash
# The test command (README): runs every suite. Postgres-backed tests need a reachable Postgres; without one they
# are skipped locally (loudly, below and in their own output) and FAIL when CI is set.
set -euo pipefail
cd "$(dirname "$0")/.."

pg_url="${PIDEVOPS_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
hostport="${pg_url#*@}"
hostport="${hostport%%/*}"
pg_host="${hostport%%:*}"
pg_port="${hostport##*:}"
[ "$pg_port" = "$hostport" ] && pg_port=5432

# What a missing service costs, counted from the tests themselves so the banner cannot go stale: each area that runs
# on both backends declares it with `per_backend!` (an area is a module of tests/it/main.rs, or a provider's suite,
# tests/it/providers/<name>/suite/mod.rs).
both_backends=$(grep -l 'per_backend!' tests/it/*.rs tests/it/providers/*/suite/mod.rs | wc -l)
if (exec 3<>"/dev/tcp/${pg_host}/${pg_port}") 2>/dev/null; then
    echo "test: Postgres reachable at ${pg_host}:${pg_port}; ${both_backends} areas run against Postgres and SQLite."
else
    cat >&2 <<MSG

************************************************************************************************
*  Postgres is NOT reachable at ${pg_host}:${pg_port}.
*  The Postgres half of each of the ${both_backends} areas run on both backends, and the tests that
*  run pidevops's processes on Postgres (replicas, leases, steering, disk-full...), will be
*  SKIPPED, each saying so in its output (they fail instead when CI is set). SQLite and
*  in-process tests still run.
*  To run everything:
*      docker compose -f deploy/docker-compose.yml up -d postgres nats
*      export PIDEVOPS_TEST_DATABASE_URL=postgres://postgres:\$POSTGRES_PASSWORD@127.0.0.1:5432/postgres
************************************************************************************************

MSG
fi

nats_url="${PIDEVOPS_TEST_NATS_URL:-nats://127.0.0.1:4222}"
nats_hostport="${nats_url#*://}"
nats_hostport="${nats_hostport%%/*}"
nats_hostport="${nats_hostport##*@}"
if (exec 3<>"/dev/tcp/${nats_hostport%%:*}/${nats_hostport##*:}") 2>/dev/null; then
    echo "test: NATS reachable at ${nats_hostport}; the bus and work suites run against JetStream and in process."
else
    cat >&2 <<MSG

************************************************************************************************
*  NATS is NOT reachable at ${nats_hostport}.
*  The JetStream halves of the bus and work suites and the three-replica test will be SKIPPED
*  (they fail instead when CI is set); the tests that start pidevops processes with NATS_URL
*  (dispatch_process, steering) FAIL. The relay's and the deployment's tests start a
*  nats-server of their own and need only the binary (nats-server on PATH or in /usr/sbin).
*  To run them:  docker compose -f deploy/docker-compose.yml up -d nats
*              (or nats-server -js) and PIDEVOPS_TEST_NATS_URL=nats://127.0.0.1:4222
*              (with compose's users: nats://pidevops:\$NATS_SERVE_PASSWORD@127.0.0.1:4222)
************************************************************************************************

MSG
fi

if ! command -v bwrap >/dev/null; then
    cat >&2 <<MSG

************************************************************************************************
*  bubblewrap (bwrap) is NOT installed. Agents are contained with it; the containment tests
*  (tests/it/hostile.rs with namespaces, doctor's containment line) will FAIL without it.
*  To install it:  apt-get install bubblewrap
************************************************************************************************

MSG
fi

# The integration tests are one binary (tests/it/main.rs, one module per area): each extra binary links sqlx,
# octocrab and async-nats again. Cargo would build a stray tests/<area>.rs as a binary of its own, so refuse it.
shopt -s nullglob
stray=(tests/*.rs)
if [ ${#stray[@]} -gt 0 ]; then
    echo "test: ${stray[*]}: move it to tests/it/ and declare it with \`mod\` in tests/it/main.rs" >&2
    exit 1
fi
shopt -u nullglob

# The integration tests mostly wait (on git, child processes, the loops' ticks, the fake APIs), not compute: with
# one test per core the cores sat about half idle (docs/benchmarks.md, "CI: where the time goes"). So twice the
# cores, at most four (what was measured; each test's app holds its own database pools). RUST_TEST_THREADS wins.
if [ -z "${RUST_TEST_THREADS:-}" ]; then
    threads=$(( $(nproc) * 2 ))
    [ "$threads" -gt 4 ] && threads=4
    export RUST_TEST_THREADS=$threads
fi
echo "test: ${RUST_TEST_THREADS} tests at a time"

exec cargo test --locked --all-targets "$@"
