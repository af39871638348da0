#!/usr/bin/env bash
# The relay throughput benchmark of docs/benchmarks.md, from the repository root:
#
#   scripts/bench-relay.sh [relaybench options]     e.g. --events 20000 --rounds 5
#
# Builds the release binaries, then runs target/release/relaybench: it drops and re-creates the database
# pidevops_relaybench, fills it, and times the real relay (with one ack outstanding, then with its window) against
# a publish-and-ack loop into JetStream and the same loop with the relay's window (same client, message size,
# headers and stream settings), round after round, dropping its streams and the database.
# Postgres: ${BENCH_PG:-postgres://postgres@127.0.0.1:5432}; NATS with JetStream: ${BENCH_NATS:-nats://127.0.0.1:4222}.
# The table goes to stdout and target/bench/relay-summary.txt; progress to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH_PG=${BENCH_PG:-postgres://postgres@127.0.0.1:5432}
BENCH_NATS=${BENCH_NATS:-nats://127.0.0.1:4222}
BENCH_OUT=${BENCH_OUT:-target/bench}

if [ -z "${BENCH_SKIP_BUILD:-}" ]; then
    cargo build --release --features bench-bins --bin relaybench >&2
fi
mkdir -p "$BENCH_OUT"
{
    echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "# $(nproc) CPUs: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
    echo "# nats-server $(nats-server --version 2>/dev/null || /usr/sbin/nats-server --version 2>/dev/null || echo '?')"
} >"$BENCH_OUT/relay-summary.txt"
target/release/relaybench --pg "$BENCH_PG" --nats "$BENCH_NATS" "$@" | tee -a "$BENCH_OUT/relay-summary.txt"
