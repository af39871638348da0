#!/usr/bin/env bash
# Runs the README's "five-minute local tour" exactly as written, so the tour cannot silently stop working.
#
#   cargo build --release && scripts/tour.sh          # or: PIDEVOPS_BIN_DIR=target/debug scripts/tour.sh
#
# The tour's ```sh blocks run in order in one shell, with three changes: the build and PATH lines use
# $PIDEVOPS_BIN_DIR (default target/release), the playground is a fresh temporary directory instead of
# /tmp/pidevops-tour, and `serve` runs in the background on a free port instead of 8080. Between blocks the script
# waits until the board has settled (intake caught up, nothing in todo or in progress), as a reader would.
# Needs git, curl, openssl, jq, python3 (a free port), and bubblewrap or Landlock for the agent's containment.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
bin_dir=$(cd "${PIDEVOPS_BIN_DIR:-target/release}" && pwd)
[ -x "$bin_dir/pidevops" ] || { echo "tour: no $bin_dir/pidevops; run cargo build --release first" >&2; exit 2; }
for tool in git curl openssl jq python3; do
    command -v "$tool" >/dev/null || { echo "tour: $tool is needed" >&2; exit 2; }
done

playground=$(mktemp -d /tmp/pidevops-tour-check.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
script="$playground.sh"
serve_pid="$playground.pid"
cleanup() {
    if [ -s "$serve_pid" ]; then kill "$(cat "$serve_pid")" 2>/dev/null || true; fi
    rm -rf "$playground" "$script" "$serve_pid"
}
trap cleanup EXIT

# The tour's blocks, between its heading and the next one, each followed by a call to `settle`.
awk '
    /^## A five-minute local tour/ { in_tour = 1; next }
    in_tour && /^## / { exit }
    in_tour && /^```sh$/ { in_block = 1; next }
    in_tour && in_block && /^```$/ { in_block = 0; print "settle"; next }
    in_block { print }
' README.md |
    sed -e '/^cargo build --release$/d' \
        -e "s|^export PATH=\"\$PWD/target/release:\$PATH\"\$|export PATH=\"$bin_dir:\$PATH\"|" \
        -e "s|/tmp/pidevops-tour|$playground|g" \
        -e "s|localhost:8080|localhost:$port|g" \
        -e "s|^pidevops serve\$|PORT=$port pidevops serve >serve.log 2>\&1 \& echo \$! >$serve_pid; wait_for_serve|" \
        >"$script"
grep -q wait_for_serve "$script" || { echo "tour: the README's tour no longer starts serve" >&2; exit 1; }

export PORT=$port
serving=false
wait_for_serve() {
    serving=true
    for _ in $(seq 100); do
        curl -sf "localhost:$port/health/live" >/dev/null && return 0
        sleep 0.1
    done
    echo "tour: serve did not start; its log:" >&2
    cat serve.log >&2
    return 1
}
# Waits (up to 30 s) until intake has read everything in the log (a webhook just posted has become its task) and
# no task is waiting to run or running. `task list` brings the read model up to the log itself before it answers.
settle() {
    $serving || return 0
    local head intake
    for _ in $(seq 300); do
        head=$(curl -sf -H "Authorization: Bearer $PIDEVOPS_ADMIN_TOKEN" "localhost:$port/api/tasks" | jq .projector.head)
        intake=$(curl -s "localhost:$port/health" | jq '.loops.intake.detail.position // -1')
        if [ "$intake" -ge "$head" ] && pidevops task list --json |
            jq -e '[.[] | select(.column == "todo" or .column == "in-progress")] | length == 0' >/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    echo "tour: the board did not settle" >&2
    return 1
}

echo "tour: running the README's tour in $playground on port $port"
# shellcheck disable=SC1090
source "$script"

# What the tour promises a reader, checked.
# T-1 is landed, and its branch deleted after (`delete_branch`); the others' branches wait for review.
for task in T-2 T-3; do
    git -C "$playground/demo.git" rev-parse --verify --quiet "refs/heads/pidevops/$task" >/dev/null ||
        { echo "tour: no branch pidevops/$task was pushed" >&2; exit 1; }
done
! git -C "$playground/demo.git" rev-parse --verify --quiet refs/heads/pidevops/T-1 >/dev/null ||
    { echo "tour: T-1's branch was not deleted after its landing" >&2; exit 1; }
[ "$(pidevops task list --json | jq '[.[] | select(.column == "in-review")] | length')" = 2 ] ||
    { echo "tour: expected two tasks in review" >&2; pidevops task list >&2; exit 1; }
[ "$(pidevops task show T-1 --json | jq -r .task.column)" = done ] ||
    { echo "tour: T-1 was not landed" >&2; pidevops task show T-1 >&2; exit 1; }
[ -n "$(git -C "$playground/demo.git" log --format=%s refs/heads/main | grep -x "T-1: attempt 1")" ] ||
    { echo "tour: main does not hold T-1's commit" >&2; exit 1; }
[ "$(curl -s "localhost:$port/health" | jq -r .status)" = pass ] || { echo "tour: /health does not pass" >&2; exit 1; }
pid=$(cat "$serve_pid")
: >"$serve_pid"
kill -TERM "$pid"
wait "$pid" || { echo "tour: serve did not exit 0 on SIGTERM" >&2; exit 1; }
cd "$repo"
echo "tour: every step of the README's tour worked"
