#!/usr/bin/env bash
# Refreshes schemas/linear/schema.graphql from Linear's public repository and records where it came from in
# schemas/linear/SOURCE.md. Usage: scripts/refresh-linear-schema.sh [<commit or branch>] (default: master).
# Then `git diff schemas/linear` shows what changed; `cargo build` and `cargo test --test it providers::linear::contract::`
# say whether pidevops's operations still fit.
set -euo pipefail
cd "$(dirname "$0")/.."
ref="${1:-master}"
repo="linear/linear"
file="packages/sdk/src/schema.graphql"
commit=$(curl -fsSL "https://api.github.com/repos/$repo/commits/$ref" |
  python3 -c 'import json,sys; c=json.load(sys.stdin); print(c["sha"], c["commit"]["committer"]["date"][:10])')
sha=${commit% *}
day=${commit#* }
version=$(curl -fsSL "https://raw.githubusercontent.com/$repo/$sha/packages/sdk/package.json" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')
curl -fsSL "https://raw.githubusercontent.com/$repo/$sha/$file" -o schemas/linear/schema.graphql.new
mv schemas/linear/schema.graphql.new schemas/linear/schema.graphql
python3 - "$sha" "$day" "$version" <<'PY'
import re, sys
sha, day, version = sys.argv[1:]
path = "schemas/linear/SOURCE.md"
text = open(path).read()
text = re.sub(r"- commit: .*", f"- commit: `{sha}` ({day}), `@linear/sdk` {version}", text)
open(path, "w").write(text)
PY
echo "schemas/linear/schema.graphql is now $repo@$sha ($day, @linear/sdk $version):"
git diff --stat -- schemas/linear
