#!/usr/bin/env bash
# kvlab serve against the official `openai` Python client: `bash scripts/openai-test.sh`
#
# Installs `openai` (the version verified in the toolchain notes) into .venv-openai, starts
# `target/release/kvlab serve` on a free loopback port, runs tests/openai_client.py, and
# stops the server whatever happens. The server runs with a random API key (KVLAB_API_KEY),
# and ends with SIGTERM while a streamed answer is under way: the answer must finish with
# `data: [DONE]` and the server exit 0 after its drain. Bounded: the server gets 300 s to
# come up, the client test 600 s, the drain 60 s.
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

source scripts/serve-lib.sh
PORT=$(free_port)
LOG=$(mktemp)
KVLAB_API_KEY=sk-kvlab-$(python3 -c 'import secrets; print(secrets.token_hex(16))')
export KVLAB_API_KEY
"$KVLAB" serve --model "$MODEL" --port "$PORT" 2> "$LOG" &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; rm -f "$LOG"' EXIT

wait_for_health "$SERVER" "$PORT" "$LOG"

KVLAB_PORT=$PORT KVLAB_BIN=$KVLAB timeout 600 .venv-openai/bin/python tests/openai_client.py

# SIGTERM while an answer streams: the drain lets it finish, then the server exits 0.
STREAM=$(mktemp)
python3 - "$PORT" "$(basename "$MODEL")" > "$STREAM" <<'PY' &
import json, sys, urllib.request
port, model = sys.argv[1], sys.argv[2]
body = json.dumps({"model": model, "prompt": "Once upon a time", "max_tokens": 48, "stream": True})
request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body.encode(), headers={
    "Authorization": "Bearer " + __import__("os").environ["KVLAB_API_KEY"], "content-type": "application/json"})
with urllib.request.urlopen(request, timeout=120) as response:
    for line in response:
        sys.stdout.write(line.decode())
        sys.stdout.flush()
PY
CURL=$!
for _ in $(seq 100); do [[ -s $STREAM ]] && break; sleep 0.1; done
kill -TERM "$SERVER"
status=0
timeout 60 tail --pid="$SERVER" -f /dev/null || status=$?
wait "$SERVER" || status=$?
wait "$CURL" || true
if [[ $status != 0 ]] || ! grep -q 'kvlab serve: stopped' "$LOG" || ! grep -q '^data: \[DONE\]' "$STREAM"; then
    echo "error: after SIGTERM the server exited $status, or the streamed answer did not finish:" >&2
    cat "$LOG" >&2
    tail -c 400 "$STREAM" >&2
    exit 1
fi
echo "drain ok: $(grep 'kvlab serve: stopped' "$LOG")"
rm -f "$STREAM"
