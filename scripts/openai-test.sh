#!/usr/bin/env bash
# kvlab serve against the official `openai` Python client: `bash scripts/openai-test.sh`
#
# Installs `openai` (the version verified in the toolchain notes) into .venv-openai, starts
# `target/release/kvlab serve` on a free loopback port, runs tests/openai_client.py, and
# stops the server whatever happens. Bounded: the server gets 300 s to come up, the client
# test 600 s.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

OPENAI_VERSION=3.57.0
KVLAB=${KVLAB:-target/release/kvlab}
MODEL=${MODEL:-models/smollm2-135m-instruct}

if [[ ! -x .venv-openai/bin/python ]]; then
    python3 -m venv .venv-openai
fi
if ! .venv-openai/bin/python -c "import openai, sys; sys.exit(openai.__version__ != '$OPENAI_VERSION')" 2>/dev/null; then
    .venv-openai/bin/pip install --quiet "openai==$OPENAI_VERSION"
fi
[[ -x $KVLAB ]] || cargo build --release

PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
LOG=$(mktemp)
"$KVLAB" serve --model "$MODEL" --port "$PORT" 2> "$LOG" &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; rm -f "$LOG"' EXIT

for _ in $(seq 300); do
    if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/health', timeout=1)" 2>/dev/null; then
        break
    fi
    if ! kill -0 "$SERVER" 2>/dev/null; then
        echo "kvlab serve exited:" >&2
        cat "$LOG" >&2
        exit 1
    fi
    sleep 1
done

KVLAB_PORT=$PORT KVLAB_BIN=$KVLAB timeout 600 .venv-openai/bin/python tests/openai_client.py
