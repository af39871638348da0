#!/usr/bin/env bash
# The whole ingest benchmark of docs/benchmarks.md, reproducible from the repository root:
#
#   scripts/bench.sh
#
# 1. builds the release binaries;
# 2. creates a fresh database pidevops_bench (dropped first if it exists, dropped again at exit);
# 3. measures the reference: pgbench inserting the same 28 KB payload, one INSERT + COMMIT per transaction, with
#    1 client (THE reference for the ratio) and 2 clients;
# 4. starts `pidevops serve` on that database on a free loopback port and waits for /health;
# 5. runs loadgen at each concurrency, scraping /metrics and the CPU time of loadgen, pidevops and Postgres around
#    every run;
# 6. stops the server with SIGTERM, measures the 1-client reference once more (absolute speed drifts here), and
# 7. prints a summary: accepted/s divided by the reference single-row rate, against the target
#    (>= 2x at 64 senders, p99 < 50 ms, no errors).
#
# Settings (environment):
#   BENCH_PG            server URL without a database   [postgres://postgres@127.0.0.1:5432]
#   BENCH_DB_PARAMS     appended to every database URL, for pgbench and the service alike, e.g. "?sslmode=disable"
#                       (by default libpq and sqlx both negotiate TLS when the server offers it, even on loopback)
#   BENCH_SECONDS       measured seconds per run         [15]
#   BENCH_WARMUP        loadgen warmup seconds per run   [2]
#   BENCH_CONCURRENCY   loadgen concurrencies            ["1 16 64 128"]
#   BENCH_PORT          first port to try for the server [18080]
#   BENCH_PAYLOAD       request body                     [tests/fixtures/github/pull_request/opened.payload.json]
#   BENCH_OUT           raw outputs go here              [target/bench]
#   BENCH_SKIP_BUILD=1  use the binaries already in target/release
#   BENCH_PIDEVOPS      the server binary to measure     [target/release/pidevops]; another build (an earlier
#                       commit's, say) for an A/B against it in the same session
#
# Exit status: 0 when every run completed without a failed request (whether or not the target is met, which the
# summary says), 1 when a request failed or a step broke.
set -euo pipefail

BENCH_PG=${BENCH_PG:-postgres://postgres@127.0.0.1:5432}
BENCH_PG=${BENCH_PG%/}
BENCH_SECONDS=${BENCH_SECONDS:-15}
BENCH_WARMUP=${BENCH_WARMUP:-2}
BENCH_CONCURRENCY=${BENCH_CONCURRENCY:-"1 16 64 128"}
BENCH_PORT=${BENCH_PORT:-18080}
BENCH_PAYLOAD=${BENCH_PAYLOAD:-tests/fixtures/github/pull_request/opened.payload.json}
BENCH_OUT=${BENCH_OUT:-target/bench}
DB_NAME=pidevops_bench
BENCH_DB_PARAMS=${BENCH_DB_PARAMS:-}
ADMIN_URL="$BENCH_PG/postgres$BENCH_DB_PARAMS"
DB_URL="$BENCH_PG/$DB_NAME$BENCH_DB_PARAMS"
SECRET=bench-secret
PGBENCH_SCRIPT=scripts/pgbench-insert.sql

log() { printf '%s bench: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

[ -f Cargo.toml ] && [ -f "$PGBENCH_SCRIPT" ] || die "run from the repository root"
for tool in psql pgbench curl jq awk; do
    command -v "$tool" >/dev/null || die "$tool is not installed"
done
[ -s "$BENCH_PAYLOAD" ] || die "no payload at $BENCH_PAYLOAD"

SERVER_PID=
CHILD_PID=
DB_CREATED=
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    if [ -n "$CHILD_PID" ] && kill -0 "$CHILD_PID" 2>/dev/null; then
        kill -TERM "$CHILD_PID" 2>/dev/null || true
        wait "$CHILD_PID" 2>/dev/null || true
    fi
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        log "stopping the server (pid $SERVER_PID)"
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 50); do
            kill -0 "$SERVER_PID" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    if [ -n "$DB_CREATED" ]; then
        log "dropping database $DB_NAME"
        psql -q -X "$ADMIN_URL" -c "DROP DATABASE IF EXISTS $DB_NAME WITH (FORCE)" >/dev/null 2>&1 ||
            log "could not drop $DB_NAME; drop it by hand"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

psql_db() { psql -X -q -v ON_ERROR_STOP=1 "$DB_URL" "$@"; }
# Every measured run starts right after a checkpoint, so none of them pays for one the run before caused (needs a
# superuser or pg_checkpoint; without it the runs go on, noisier).
checkpoint() { psql_db -c 'CHECKPOINT' 2>/dev/null || log "CHECKPOINT refused; runs may include checkpoint I/O"; }

# run_step STDOUT STDERR COMMAND...: runs a long step in the background and waits for it, so INT/TERM interrupt it
# at once (the trap then stops it). The files are opened here, not around the call, so the trap's own messages
# still reach the terminal.
run_step() {
    local out=$1 err=$2
    shift 2
    "$@" >"$out" 2>"$err" &
    CHILD_PID=$!
    local rc=0
    wait "$CHILD_PID" || rc=$?
    CHILD_PID=
    return "$rc"
}

# CPU seconds (user + system) of this shell's reaped children, from the `times` builtin's second line. `times` must
# run in this shell, not in a $(...) subshell, so it is written to a file first.
children_cpu() {
    awk 'NR == 2 {
        total = 0
        for (i = 1; i <= 2; i++) { split($i, p, "m"); sub(/s$/, "", p[2]); total += p[1] * 60 + p[2] }
        print total
    }' "$1"
}

# CPU seconds (user + system) used so far by one process.
TICKS=$(getconf CLK_TCK)
cpu_of_pid() {
    awk -v t="$TICKS" '{ sub(/^.*\) /, ""); print ($12 + $13) / t }' "/proc/$1/stat" 2>/dev/null || echo 0
}
# CPU seconds used so far by Postgres: every live postgres process plus what the postmaster reaped from exited ones.
cpu_of_postgres() {
    local total=0 pid stat
    for pid in $(pgrep -x postgres || true); do
        stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
        total=$(awk -v t="$TICKS" -v acc="$total" '{ sub(/^.*\) /, ""); print acc + ($12 + $13 + $14 + $15) / t }' <<<"$stat")
    done
    echo "$total"
}

# A metric's value from a /metrics snapshot (0 if absent).
metric() { awk -v name="$1" '$1 == name { v = $2 } END { print v + 0 }' "$2"; }
# How much a metric grew during the run at $2 senders.
metric_delta() {
    awk -v a="$(metric "$1" "$OUT/metrics-$2-after.prom")" -v b="$(metric "$1" "$OUT/metrics-$2-before.prom")" \
        'BEGIN { print a - b }'
}

# ---------------------------------------------------------------------------------------------------------------
mkdir -p "$BENCH_OUT"
OUT=$(cd "$BENCH_OUT" && pwd)
rm -f "$OUT"/*.json "$OUT"/*.txt "$OUT"/*.err "$OUT"/*.prom "$OUT"/*.log

if [ "${BENCH_SKIP_BUILD:-}" != 1 ]; then
    log "building release binaries"
    cargo build --release --features bench-bins --bins
fi
PIDEVOPS=${BENCH_PIDEVOPS:-target/release/pidevops}
LOADGEN=target/release/loadgen
[ -x "$PIDEVOPS" ] && [ -x "$LOADGEN" ] || die "release binaries missing"

# --- the machine -------------------------------------------------------------------------------------------------
{
    echo "date:            $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "server binary:   $PIDEVOPS"
    echo "commit:          $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
    echo "uncommitted:     $(git status --short 2>/dev/null | awk '{ print $2 }' | tr '\n' ' ')"
    echo "kernel:          $(uname -sr)"
    echo "cpu:             $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), nproc $(nproc)"
    echo "memory:          $(free -h | awk '/^Mem:/ { print $2 " total, " $7 " available" }')"
    echo "loadavg:         $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "postgres:        $(psql -X -At "$ADMIN_URL" -c 'SHOW server_version')"
    for setting in synchronous_commit fsync wal_sync_method full_page_writes commit_delay shared_buffers max_wal_size; do
        printf '%-17s%s\n' "$setting:" "$(psql -X -At "$ADMIN_URL" -c "SHOW $setting")"
    done
    echo "tls to postgres: $(psql -X -At "$ADMIN_URL" -c "SELECT CASE WHEN ssl THEN version || ' ' || cipher ELSE 'off' END FROM pg_stat_ssl WHERE pid = pg_backend_pid()") (BENCH_DB_PARAMS=${BENCH_DB_PARAMS:-none})"
    echo "autovacuum:      $(psql -X -At "$ADMIN_URL" -c 'SHOW autovacuum')"
    echo "other sessions:  $(psql -X -At "$ADMIN_URL" -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()")"
} | tee "$OUT/machine.txt" >&2

# --- a fresh database --------------------------------------------------------------------------------------------
log "creating database $DB_NAME"
psql -X -q -v ON_ERROR_STOP=1 "$ADMIN_URL" -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB_NAME WITH (FORCE)" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 "$ADMIN_URL" -c "CREATE DATABASE $DB_NAME" >/dev/null
DB_CREATED=1

# --- the reference -----------------------------------------------------------------------------------------------
psql_db <<'SQL'
-- Stored uncompressed (EXTERNAL), so every reference insert compresses the body afresh as the service's inserts
-- do; a compressed source value would be copied as it is, skipping that work.
CREATE TABLE payload (body bytea NOT NULL);
ALTER TABLE payload ALTER COLUMN body SET STORAGE EXTERNAL;
CREATE TABLE ref_events (id bigserial PRIMARY KEY, delivery uuid NOT NULL, body bytea NOT NULL);
-- The same body compression as the events table (its migration asks for lz4 where the server has it).
DO $$
BEGIN
    ALTER TABLE ref_events ALTER COLUMN body SET COMPRESSION lz4;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'lz4 is not available; ref_events uses the default compression';
END
$$;
SQL
# The exact bytes of the payload, as hex through COPY (any size, no quoting).
{
    printf '\\\\x'
    od -An -v -tx1 "$BENCH_PAYLOAD" | tr -d ' \n'
    printf '\n'
} | psql_db -c '\copy payload (body) FROM pstdin'
stored=$(psql_db -At -c 'SELECT length(body) FROM payload')
size=$(wc -c <"$BENCH_PAYLOAD" | tr -d ' ')
[ "$stored" = "$size" ] || die "payload stored as $stored bytes, the file has $size"

# pgbench at $1 clients; sets R_TPS and R_LAT (average latency, ms).
reference() {
    local clients=$1 name=$2
    psql_db -c 'TRUNCATE ref_events'
    checkpoint
    log "reference: pgbench single-row INSERT + COMMIT, $clients client(s), ${BENCH_SECONDS} s"
    run_step "$OUT/$name.txt" "$OUT/$name.err" \
        pgbench -n -M prepared -f "$PGBENCH_SCRIPT" -c "$clients" -j "$clients" -T "$BENCH_SECONDS" "$DB_URL" || {
        cat "$OUT/$name.err" >&2
        cat "$OUT/$name.txt" >&2
        die "pgbench failed"
    }
    local failed tps lat
    failed=$(awk '/number of failed transactions/ { print $5 }' "$OUT/$name.txt")
    [ "${failed:-0}" = 0 ] || die "pgbench reported $failed failed transactions"
    psql_db -At -c "SELECT 'stored body: ' || coalesce(pg_column_compression(body), 'uncompressed') || ', ' ||
                           pg_column_size(body) || ' bytes' FROM ref_events LIMIT 1" >>"$OUT/$name.txt"
    tps=$(awk '/^tps = / { print $3 }' "$OUT/$name.txt")
    lat=$(awk '/^latency average/ { print $4 }' "$OUT/$name.txt")
    [ -n "$tps" ] || die "no tps in pgbench output ($OUT/$name.txt)"
    R_TPS=$tps
    R_LAT=$lat
}
reference 1 ref-c1-before
REF1_TPS=$R_TPS REF1_LAT=$R_LAT
reference 2 ref-c2
REF2_TPS=$R_TPS REF2_LAT=$R_LAT
log "reference: ${REF1_TPS} rows/s at 1 client, ${REF2_TPS} rows/s at 2 clients"
psql_db -c 'TRUNCATE ref_events'

# --- the server --------------------------------------------------------------------------------------------------
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
# A clean environment: only what the benchmark sets, so no ambient secret or config arms extra loops.
env -i PATH="$PATH" HOME="${HOME:-/tmp}" \
    DATABASE_URL="$DB_URL" PORT="$PORT" PIDEVOPS_BIND=127.0.0.1 \
    GITHUB_WEBHOOK_SECRET="$SECRET" LOG_FORMAT=json RUST_LOG=warn \
    PIDEVOPS_CONFIG=/dev/null \
    "$PIDEVOPS" serve >"$OUT/server.log" 2>&1 &
SERVER_PID=$!
healthy=
for _ in $(seq 150); do
    kill -0 "$SERVER_PID" 2>/dev/null || {
        cat "$OUT/server.log" >&2
        die "the server exited"
    }
    if [ "$(curl -s -o "$OUT/health.json" -w '%{http_code}' "$BASE/health" || true)" = 200 ]; then
        healthy=1
        break
    fi
    sleep 0.2
done
[ -n "$healthy" ] || {
    cat "$OUT/health.json" "$OUT/server.log" >&2 2>/dev/null || true
    die "/health did not answer 200 within 30 s"
}
log "server healthy (pid $SERVER_PID)"

# --- the load ----------------------------------------------------------------------------------------------------
FAILED_RUNS=0
ROWS=()
for c in $BENCH_CONCURRENCY; do
    checkpoint
    curl -sf "$BASE/metrics" >"$OUT/metrics-$c-before.prom"
    head=$(psql_db -At -c 'SELECT coalesce(max(position), 0) FROM events')
    srv0=$(cpu_of_pid "$SERVER_PID")
    pg0=$(cpu_of_postgres)
    log "loadgen: $c senders, ${BENCH_WARMUP} s warmup + ${BENCH_SECONDS} s"
    rc=0
    times >"$OUT/times-$c-before.txt"
    run_step "$OUT/loadgen-$c.json" "$OUT/loadgen-$c.txt" \
        "$LOADGEN" --url "$BASE" --secret "$SECRET" --payload "$BENCH_PAYLOAD" --concurrency "$c" \
        --duration "$BENCH_SECONDS" --warmup "$BENCH_WARMUP" --json || rc=$?
    times >"$OUT/times-$c-after.txt"
    srv1=$(cpu_of_pid "$SERVER_PID")
    pg1=$(cpu_of_postgres)
    curl -sf "$BASE/metrics" >"$OUT/metrics-$c-after.prom"
    cat "$OUT/loadgen-$c.txt" >&2
    if [ "$rc" != 0 ]; then
        FAILED_RUNS=$((FAILED_RUNS + 1))
        log "loadgen at $c senders exited $rc"
    fi
    [ -s "$OUT/loadgen-$c.json" ] || die "loadgen at $c senders printed no summary"
    kill -0 "$SERVER_PID" 2>/dev/null || die "the server died during the run at $c senders"

    # Group commit, as the server saw it during this run (warmup included).
    batches=$(metric_delta pidevops_append_batch_size_count "$c")
    events=$(metric_delta pidevops_append_batch_size_sum "$c")
    append_s=$(metric_delta pidevops_append_duration_seconds_sum "$c")
    wall=$(jq -r '.warmup_s + .elapsed_s' "$OUT/loadgen-$c.json")
    lg_cpu=$(awk -v a="$(children_cpu "$OUT/times-$c-after.txt")" -v b="$(children_cpu "$OUT/times-$c-before.txt")" \
        'BEGIN { print a - b }')
    ROWS+=("$(jq -r --arg c "$c" --arg batches "$batches" --arg events "$events" --arg append_s "$append_s" \
        --arg wall "$wall" --arg head "$head" --arg lg "$lg_cpu" \
        --arg srv "$(awk -v a="$srv1" -v b="$srv0" 'BEGIN { print a - b }')" \
        --arg pg "$(awk -v a="$pg1" -v b="$pg0" 'BEGIN { print a - b }')" \
        '[$c, .accepted_per_s, .p50_ms, .p99_ms, .max_ms, .failed + .warmup_failed, .requests,
          $batches, $events, $append_s, $wall, $lg, $srv, $pg, $head] | @tsv' "$OUT/loadgen-$c.json")")
done

log "stopping the server"
kill -TERM "$SERVER_PID"
wait "$SERVER_PID" || log "the server exited with status $?"
SERVER_PID=

reference 1 ref-c1-after
REF1B_TPS=$R_TPS REF1B_LAT=$R_LAT
# The ratio uses the higher of the two 1-client measurements: the stricter comparison.
REF=$(awk -v a="$REF1_TPS" -v b="$REF1B_TPS" 'BEGIN { print (a > b) ? a : b }')

# --- the summary -------------------------------------------------------------------------------------------------
{
    echo
    echo "== reference: pgbench, one INSERT + COMMIT of the $(wc -c <"$BENCH_PAYLOAD" | tr -d ' ') byte payload per transaction, ${BENCH_SECONDS} s each"
    printf '%-34s %10s %12s\n' "run" "rows/s" "latency ms"
    printf '%-34s %10.1f %12s\n' "1 client (before the service runs)" "$REF1_TPS" "$REF1_LAT"
    printf '%-34s %10.1f %12s\n' "2 clients" "$REF2_TPS" "$REF2_LAT"
    printf '%-34s %10.1f %12s\n' "1 client (after the service runs)" "$REF1B_TPS" "$REF1B_LAT"
    echo "reference rows: $(grep -h '^stored body' "$OUT/ref-c1-before.txt" || echo 'stored body: unknown')"
    printf 'reference single-row rate for the ratio: %.1f rows/s (the higher 1-client figure)\n' "$REF"
    echo
    echo "== service: loadgen -> POST /webhooks/github -> pidevops serve -> Postgres, ${BENCH_SECONDS} s after ${BENCH_WARMUP} s warmup"
    printf '%6s %11s %7s %9s %9s %9s %7s %9s %7s %10s %8s %8s %8s\n' \
        senders accepted/s ratio "p50 ms" "p99 ms" "max ms" errors "log size" batch "append ms" \
        "lg cpu%" "srv cpu%" "pg cpu%"
    for row in "${ROWS[@]}"; do
        IFS=$'\t' read -r c aps p50 p99 max errors _requests batches events append_s wall lg srv pg head <<<"$row"
        awk -v c="$c" -v aps="$aps" -v ref="$REF" -v p50="$p50" -v p99="$p99" -v max="$max" -v errors="$errors" \
            -v batches="$batches" -v events="$events" -v append_s="$append_s" -v wall="$wall" \
            -v lg="$lg" -v srv="$srv" -v pg="$pg" -v head="$head" 'BEGIN {
                batch = batches > 0 ? events / batches : 0
                append_ms = batches > 0 ? 1000 * append_s / batches : 0
                printf "%6d %11.1f %6.2fx %9.2f %9.2f %9.2f %7d %9d %7.1f %10.2f %8.0f %8.0f %8.0f\n",
                    c, aps, aps / ref, p50, p99, max, errors, head, batch, append_ms,
                    100 * lg / wall, 100 * srv / wall, 100 * pg / wall
            }'
    done
    echo "(ratio = accepted/s / reference; log size = events already in the log when the run started; batch = mean"
    echo " events per append transaction; append ms = mean time per append transaction (both from /metrics, warmup"
    echo " included); cpu% = CPU time over the run's wall time incl. warmup, 100% = one of $(nproc) cores)"
    echo
    verdict=
    for row in "${ROWS[@]}"; do
        IFS=$'\t' read -r c aps _p50 p99 _max errors _rest <<<"$row"
        [ "$c" = 64 ] || continue
        verdict=$(awk -v aps="$aps" -v ref="$REF" -v p99="$p99" -v errors="$errors" 'BEGIN {
            ratio = aps / ref
            ok = (ratio >= 2 && p99 < 50 && errors == 0)
            printf "target at 64 senders (>= 2x reference, p99 < 50 ms, no errors): %s (%.2fx, p99 %.2f ms, %d errors)%s",
                ok ? "MET" : "NOT MET", ratio, p99, errors, ratio < 1 ? " -- below 1x is a defect" : ""
        }')
    done
    echo "${verdict:-target at 64 senders: not measured (64 is not in BENCH_CONCURRENCY)}"
    echo "raw outputs: $OUT"
} | tee "$OUT/summary.txt"

[ "$FAILED_RUNS" = 0 ] || die "$FAILED_RUNS loadgen run(s) had failed requests"
