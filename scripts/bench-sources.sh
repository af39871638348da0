#!/usr/bin/env bash
# Signed Slack ingest against signed GitHub ingest, in the same run, on the same server and database
# (docs/benchmarks.md, "Slack ingest"), reproducible from the repository root:
#
#   scripts/bench-sources.sh
#
# 1. builds the release binaries (unless BENCH_SKIP_BUILD=1);
# 2. creates a fresh Postgres database pidevops_bench_sources (dropped again at exit);
# 3. starts `pidevops serve` on it with a GitHub webhook secret and a Slack signing secret;
# 4. runs loadgen BENCH_ROUNDS times for each source, alternating which goes first, at BENCH_CONCURRENCY senders:
#    GitHub's `ping` (2,768 bytes, signed once) and a Slack channel message callback of about the same size
#    (2,465 bytes, a fresh event_id and timestamp each, signed per request as Slack does). Neither is intake's
#    business, so both measure ingest alone;
# 5. prints each round's accepted/s and p99 and the median ratio Slack / GitHub.
#
# Settings (environment): BENCH_PG [postgres://postgres@127.0.0.1:5432], BENCH_SECONDS [10], BENCH_WARMUP [2],
# BENCH_ROUNDS [3], BENCH_CONCURRENCY [64], BENCH_PORT [18180], BENCH_OUT [target/bench-sources],
# BENCH_SKIP_BUILD=1.
set -euo pipefail

BENCH_PG=${BENCH_PG:-postgres://postgres@127.0.0.1:5432}
BENCH_PG=${BENCH_PG%/}
BENCH_SECONDS=${BENCH_SECONDS:-10}
BENCH_WARMUP=${BENCH_WARMUP:-2}
BENCH_ROUNDS=${BENCH_ROUNDS:-3}
BENCH_CONCURRENCY=${BENCH_CONCURRENCY:-64}
BENCH_PORT=${BENCH_PORT:-18180}
BENCH_OUT=${BENCH_OUT:-target/bench-sources}
DB_NAME=pidevops_bench_sources
ADMIN_URL="$BENCH_PG/postgres"
DB_URL="$BENCH_PG/$DB_NAME"
SECRET=bench-secret
GITHUB_PAYLOAD=tests/fixtures/github/ping/with-organization.payload.json
SLACK_PAYLOAD=tests/fixtures/slack/message.channels.json

log() { printf '%s bench-sources: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

[ -f Cargo.toml ] || die "run from the repository root"
for tool in psql curl jq awk; do
    command -v "$tool" >/dev/null || die "$tool is not installed"
done

SERVER_PID=
cleanup() {
    if [ -n "$SERVER_PID" ]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    psql -X -q "$ADMIN_URL" -c "DROP DATABASE IF EXISTS $DB_NAME WITH (FORCE)" >/dev/null 2>&1 || true
}
trap cleanup EXIT

mkdir -p "$BENCH_OUT"
if [ "${BENCH_SKIP_BUILD:-}" != 1 ]; then
    log "building release binaries"
    cargo build --release --features bench-bins --bin pidevops --bin loadgen
fi
PIDEVOPS=target/release/pidevops
LOADGEN=target/release/loadgen
if [ ! -x "$PIDEVOPS" ] || [ ! -x "$LOADGEN" ]; then die "release binaries missing"; fi

log "creating database $DB_NAME"
psql -X -q -v ON_ERROR_STOP=1 "$ADMIN_URL" -c "SET client_min_messages = warning" \
    -c "DROP DATABASE IF EXISTS $DB_NAME WITH (FORCE)" -c "CREATE DATABASE $DB_NAME" >/dev/null

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
PORT=
for candidate in $(seq "$BENCH_PORT" $((BENCH_PORT + 50))); do
    if port_free "$candidate"; then
        PORT=$candidate
        break
    fi
done
[ -n "$PORT" ] || die "no free port from $BENCH_PORT"
BASE="http://127.0.0.1:$PORT"

log "starting pidevops serve on $BASE"
env -i PATH="$PATH" HOME="${HOME:-/tmp}" \
    DATABASE_URL="$DB_URL" PORT="$PORT" PIDEVOPS_BIND=127.0.0.1 \
    GITHUB_WEBHOOK_SECRET="$SECRET" SLACK_SIGNING_SECRET="$SECRET" LOG_FORMAT=json RUST_LOG=warn \
    PIDEVOPS_CONFIG=/dev/null \
    "$PIDEVOPS" serve >"$BENCH_OUT/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 150); do
    kill -0 "$SERVER_PID" 2>/dev/null || {
        cat "$BENCH_OUT/server.log" >&2
        die "the server exited"
    }
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/health" || true)" = 200 ] && break
    sleep 0.2
done

# One loadgen run of source $1 in round $2; its JSON summary in $BENCH_OUT/$1-$2.json.
run() {
    local source=$1 round=$2 payload
    payload=$GITHUB_PAYLOAD
    [ "$source" = slack ] && payload=$SLACK_PAYLOAD
    log "round $round: $source, $BENCH_CONCURRENCY senders, ${BENCH_WARMUP} s warmup + ${BENCH_SECONDS} s"
    "$LOADGEN" --url "$BASE" --source "$source" --secret "$SECRET" --payload "$payload" \
        --event ping --concurrency "$BENCH_CONCURRENCY" --duration "$BENCH_SECONDS" --warmup "$BENCH_WARMUP" \
        --json >"$BENCH_OUT/$source-$round.json" 2>"$BENCH_OUT/$source-$round.txt" ||
        die "loadgen ($source, round $round) had failed requests: $(cat "$BENCH_OUT/$source-$round.txt")"
}

for round in $(seq "$BENCH_ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then
        run github "$round"
        run slack "$round"
    else
        run slack "$round"
        run github "$round"
    fi
done

{
    echo "== Slack ingest against GitHub ingest, $BENCH_CONCURRENCY senders, ${BENCH_SECONDS} s per run, Postgres"
    printf '%-6s %14s %10s %14s %10s %8s\n' round github/s "p99 ms" slack/s "p99 ms" ratio
    ratios=()
    for round in $(seq "$BENCH_ROUNDS"); do
        g=$(jq -r '.accepted_per_s' "$BENCH_OUT/github-$round.json")
        gp=$(jq -r '.p99_ms' "$BENCH_OUT/github-$round.json")
        s=$(jq -r '.accepted_per_s' "$BENCH_OUT/slack-$round.json")
        sp=$(jq -r '.p99_ms' "$BENCH_OUT/slack-$round.json")
        r=$(awk -v s="$s" -v g="$g" 'BEGIN { printf "%.3f", s / g }')
        ratios+=("$r")
        printf '%-6s %14.1f %10.2f %14.1f %10.2f %8s\n' "$round" "$g" "$gp" "$s" "$sp" "$r"
    done
    median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
    echo "median ratio Slack / GitHub accepted/s: $median (target: within 10 %, i.e. >= 0.90)"
} | tee "$BENCH_OUT/summary.txt"
