#!/usr/bin/env bash
# Stops the server that start.sh started (the process id in .venv/server.pid).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pidfile="$here/.venv/server.pid"
if [ ! -f "$pidfile" ]; then
    echo "no server started by start.sh"
    exit 0
fi
pid="$(cat "$pidfile")"
if kill "$pid" 2>/dev/null; then
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    echo "stopped the server (pid $pid)"
else
    echo "the server (pid $pid) was not running"
fi
rm -f "$pidfile"
