#!/usr/bin/env bash
# Starts llama.cpp's OpenAI-compatible server (llama-cpp-python) with Gemma 3 270M on 127.0.0.1,
# waits until it answers and prints the URL to give evalx.  PORT=8080 by default; the server's
# output goes to .venv/server.log and its process id to .venv/server.pid (stop.sh stops it).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv"
port="${PORT:-8080}"
model="$here/models/gemma-3-270m-q4_k_m.gguf"
pidfile="$venv/server.pid"
log="$venv/server.log"
url="http://127.0.0.1:$port/v1"

if [ ! -f "$model" ] || [ ! -x "$venv/bin/python" ]; then
    echo "no model or venv yet: run $here/setup.sh first" >&2
    exit 1
fi
if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "already running (pid $(cat "$pidfile")): $url"
    exit 0
fi

# --chat_format alpaca: the GGUF has no chat template.  --n_threads 1: one core for the model, one
# for evalx.  --interrupt_requests False: a new request does not cut off a stream in progress.
# --embedding True: /v1/embeddings answers (off by default).  The server answers one request at a
# time, so the example config runs at concurrency 1.
setsid "$venv/bin/python" -m llama_cpp.server \
    --model "$model" --model_alias gemma-3-270m \
    --host 127.0.0.1 --port "$port" \
    --chat_format alpaca --n_threads 1 --logits_all False --interrupt_requests False \
    --embedding True \
    >"$log" 2>&1 </dev/null &
echo $! >"$pidfile"

# Wait until GET /v1/models answers (at most 120 s), or the server has exited.
wait_ready='
import os, sys, time, urllib.request
url, pid = sys.argv[1], int(sys.argv[2])
started = time.monotonic()
while time.monotonic() < started + 120:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit(1)
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            print(f"{time.monotonic() - started:.1f}")
            sys.exit(0)
    except OSError:
        time.sleep(0.2)
sys.exit(1)
'
if ! waited=$("$venv/bin/python" -c "$wait_ready" "$url/models" "$(cat "$pidfile")"); then
    echo "the server did not start; the end of its log ($log):" >&2
    tail -n 20 "$log" >&2
    exit 1
fi
echo "server ready in $waited s (pid $(cat "$pidfile")): $url"
echo "export EVALX_REAL_MODEL_URL=$url"
