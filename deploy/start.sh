#!/bin/sh
# pidevops as uid 10001 even when the platform starts the container as root. Railway mounts volumes owned by root,
# which uid 10001 cannot write, and offers only RAILWAY_RUN_UID=0 for it: started as root, this hands the data
# directory and WORKSPACE_ROOT (not what is inside them) to the pidevops user, then runs pidevops as that user
# with no supplementary groups. Started as anyone else (the images' USER 10001), it runs pidevops as it is.
#
#   pidevops-start serve     (Railway's start command; .railway/railway.ts, railway.toml)
set -eu
uid="${PIDEVOPS_UID:-10001}"
gid="${PIDEVOPS_GID:-10001}"
if [ "$(id -u)" = 0 ] && [ "$uid" != 0 ]; then
    for dir in "${PIDEVOPS_DATA_DIR:-/app/data}" "${WORKSPACE_ROOT:-/app/data/workspaces}"; do
        mkdir -p "$dir"
        chown "$uid:$gid" "$dir"
    done
    HOME="${PIDEVOPS_HOME:-/home/pidevops}"
    export HOME
    exec setpriv --reuid="$uid" --regid="$gid" --clear-groups -- pidevops "$@"
fi
exec pidevops "$@"
