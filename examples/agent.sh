#!/bin/sh
# A stand-in coding agent for trying pidevops with no API key: it reads the prompt on its standard input, as the
# real agents do, and writes it down as NOTES.md in its working directory (the attempt's worktree), which pidevops
# then commits and pushes on the task's branch. Use it as `pidevops init --local <repo> --agent <this file>`.
set -eu
echo "example agent: working in $(pwd)"
cat > NOTES.md
echo "example agent: wrote NOTES.md ($(wc -c < NOTES.md) bytes)"
