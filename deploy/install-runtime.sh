#!/usr/bin/env bash
# The runtime pidevops needs around it, on Debian (bookworm or newer), as root. deploy/Dockerfile runs this script to
# build its images and .ci/run runs it on the CI machine, so CI proves the image's install works.
#
#   deploy/install-runtime.sh                    # git, bubblewrap, CA certificates, Node.js, the four agent CLIs
#   INSTALL_AGENTS=0 deploy/install-runtime.sh   # the slim runtime: git, bubblewrap, CA certificates only
#
# Everything an agent needs goes under $AGENTS_PREFIX (/opt/pidevops-agents): Node.js in bin/node, npm, and each
# CLI, its executable in bin/ (the image puts that directory first on PATH). Every version is pinned below and can
# be overridden from the environment (the Dockerfile's build arguments have the same names and defaults). An
# installed pin is not reinstalled, so a second run changes nothing.
#
# Node.js: @anthropic-ai/claude-code asks for Node >= 22 (its `engines`), which Debian bookworm (18) and trixie
# (20) do not package. Node comes from the npm registry instead: the node-linux-<arch> package is the official
# build's binary (what the `node` npm package installs), and the npm package is npm itself. A bootstrap npm (the
# machine's, else Debian's nodejs and npm) fetches both with `npm pack` from whatever registry npm is configured
# for (`npm_config_registry`, .npmrc); each tarball is also checked against the sha512 integrity the registry
# publishes for it.
set -euo pipefail

CLAUDE_CODE_VERSION="${CLAUDE_CODE_VERSION:-2.1.332}"
CODEX_VERSION="${CODEX_VERSION:-0.171.0}"
OPENCODE_VERSION="${OPENCODE_VERSION:-1.18.33}"
PI_VERSION="${PI_VERSION:-0.73.1}"
NODE_VERSION="${NODE_VERSION:-24.22.1}"
NPM_VERSION="${NPM_VERSION:-11.21.2}"
INSTALL_AGENTS="${INSTALL_AGENTS:-1}"
AGENTS_PREFIX="${AGENTS_PREFIX:-/opt/pidevops-agents}"

say() { echo "install-runtime: $*"; }
fail() {
    echo "install-runtime: $*" >&2
    exit 1
}

[ "$(id -u)" = 0 ] || fail "run as root (it installs Debian packages and writes $AGENTS_PREFIX)"
command -v apt-get >/dev/null || fail "needs Debian (apt-get)"
case "$INSTALL_AGENTS" in
    0 | 1) ;;
    *) fail "INSTALL_AGENTS=$INSTALL_AGENTS: expected 0 (slim) or 1" ;;
esac

# Debian packages, only those missing (a CI machine has most of them already).
packages=(ca-certificates git bubblewrap)
# A bootstrap npm, to fetch Node.js and npm themselves: the machine's, else Debian's.
bootstrapped=0
if [ "$INSTALL_AGENTS" = 1 ] && ! command -v npm >/dev/null; then
    packages+=(nodejs npm)
    bootstrapped=1
fi
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
    say "apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
[ "$INSTALL_AGENTS" = 0 ] && {
    say "slim runtime installed (INSTALL_AGENTS=0: no Node.js, no agent CLIs)"
    exit 0
}

mkdir -p "$AGENTS_PREFIX/bin"
# One install at a time: CI runs and engineers on one machine may start this together.
exec 9>"$AGENTS_PREFIX/.install.lock"
flock 9

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

bootstrap_npm=$(command -v npm) || fail "no npm to bootstrap with, even after installing Debian's"

# The tarball of `name@version` from the registry npm is configured for, in $2, checked against the sha512
# integrity the registry publishes for it.
fetch_package() {
    local spec=$1 out=$2 integrity packed want got
    integrity=$("$bootstrap_npm" view "$spec" dist.integrity 2>/dev/null) || fail "$spec: not in the npm registry"
    case "$integrity" in
        sha512-*) ;;
        *) fail "$spec: the registry gave no sha512 integrity" ;;
    esac
    packed=$(cd "$scratch" && "$bootstrap_npm" pack --silent "$spec" 2>/dev/null | tail -n1) ||
        fail "$spec: npm pack failed"
    [ -f "$scratch/$packed" ] || fail "$spec: npm pack wrote no tarball"
    mv "$scratch/$packed" "$out"
    want=$(printf '%s' "${integrity#sha512-}" | base64 -d | od -An -v -tx1 | tr -d ' \n')
    got=$(sha512sum "$out" | cut -d' ' -f1)
    [ "$want" = "$got" ] || fail "$spec: the tarball does not match the registry's sha512 integrity"
}

case "$(uname -m)" in
    x86_64) arch=x64 ;;
    aarch64) arch=arm64 ;;
    *) fail "no Node.js build for $(uname -m)" ;;
esac

node="$AGENTS_PREFIX/bin/node"
if [ "$("$node" --version 2>/dev/null || true)" = "v$NODE_VERSION" ]; then
    say "node $NODE_VERSION already installed"
else
    say "node $NODE_VERSION (node-linux-$arch from the npm registry)"
    fetch_package "node-linux-$arch@$NODE_VERSION" "$scratch/node.tgz"
    tar -xzf "$scratch/node.tgz" -C "$scratch" package/bin/node
    install -m 0755 "$scratch/package/bin/node" "$node.new"
    mv -f "$node.new" "$node"
fi
# From here on, the node and npm under the prefix: whatever else is on the machine (Node 20 here) is not used.
export PATH="$AGENTS_PREFIX/bin:$PATH"

# The version of an npm package installed under the prefix, or nothing.
installed_version() {
    local manifest="$AGENTS_PREFIX/lib/node_modules/$1/package.json"
    [ -f "$manifest" ] || return 0
    "$node" -p "require(process.argv[1]).version" "$manifest" 2>/dev/null || true
}

npm_cli="$AGENTS_PREFIX/lib/node_modules/npm/bin/npm-cli.js"
if [ "$(installed_version npm)" = "$NPM_VERSION" ]; then
    say "npm $NPM_VERSION already installed"
else
    say "npm $NPM_VERSION"
    fetch_package "npm@$NPM_VERSION" "$scratch/npm.tgz"
    tar -xzf "$scratch/npm.tgz" -C "$scratch"
    # npm installs itself from the checked tarball: nothing else is downloaded for it.
    "$node" "$scratch/package/bin/npm-cli.js" install --global --prefix "$AGENTS_PREFIX" \
        --no-audit --no-fund --loglevel=error "$scratch/npm.tgz"
fi

for spec in \
    "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" \
    "@openai/codex@$CODEX_VERSION" \
    "opencode-ai@$OPENCODE_VERSION" \
    "@mariozechner/pi-coding-agent@$PI_VERSION"; do
    name=${spec%@*}
    version=${spec##*@}
    if [ "$(installed_version "$name")" = "$version" ]; then
        say "$spec already installed"
        continue
    fi
    say "npm install -g --prefix $AGENTS_PREFIX $spec"
    # Their postinstall scripts put each CLI's native binary in place: they run (npm runs them as the prefix's owner).
    "$node" "$npm_cli" install --global --prefix "$AGENTS_PREFIX" \
        --no-audit --no-fund --loglevel=error "$spec"
done

for cli in claude codex opencode pi; do
    [ -x "$AGENTS_PREFIX/bin/$cli" ] || fail "$cli is not in $AGENTS_PREFIX/bin after the install"
done
if [ "$bootstrapped" = 1 ]; then
    # Debian's Node.js and npm were only the bootstrap: the prefix has its own.
    say "removing the bootstrap nodejs and npm"
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq nodejs npm
    DEBIAN_FRONTEND=noninteractive apt-get autoremove -y -qq
fi
say "done: node $("$node" --version), npm $(installed_version npm), claude-code $CLAUDE_CODE_VERSION, codex $CODEX_VERSION, opencode $OPENCODE_VERSION, pi $PI_VERSION in $AGENTS_PREFIX/bin"
