#!/usr/bin/env bash
# kvlab serve fuzzed from its own OpenAPI description: `bash scripts/api-fuzz.sh`
#
# Installs Schemathesis (PyPI) into .venv-fuzz, starts `target/release/kvlab serve` with a
# random API key, a KV pool of 512 positions and 32 tokens for a request that names no
# max_tokens (so no generated request runs for long: a longer one is refused with 400, as
# the spec says), and runs Schemathesis against GET /openapi.json: positive and negative
# requests for every route but GET /v1/engine/events (the live view's stream never ends, so
# a fuzzer waiting for a whole body would only time out; it takes no parameters, and
# tests/live_view.rs checks it: first event at once, the key, the stop). About 30 s on 2 cores. It fails when any
# answer is a 5xx, or does not match the spec (its status, content type or body schema).
# Bounded: examples per route (FUZZ_EXAMPLES, default 25), and 900 s for the whole run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SCHEMATHESIS_VERSION=4.32.5
KVLAB=${KVLAB:-target/release/kvlab}
MODEL=${MODEL:-models/smollm2-135m-instruct}
EXAMPLES=${FUZZ_EXAMPLES:-25}

if [[ ! -x .venv-fuzz/bin/st ]]; then
    python3 -m venv .venv-fuzz
fi
if ! .venv-fuzz/bin/python -c "import importlib.metadata as m, sys; sys.exit(m.version('schemathesis') != '$SCHEMATHESIS_VERSION')" 2>/dev/null; then
    .venv-fuzz/bin/pip install --quiet "schemathesis==$SCHEMATHESIS_VERSION"
fi
[[ -x $KVLAB ]] || cargo build --release

source scripts/serve-lib.sh
PORT=$(free_port)
LOG=$(mktemp)
KEY=sk-fuzz-$(python3 -c 'import secrets; print(secrets.token_hex(16))')
# 512 positions of SmolLM2 in f32: 30 layers x 3 KV heads x 64 x 2 x 4 bytes each.
KVLAB_API_KEY=$KEY "$KVLAB" serve --model "$MODEL" --port "$PORT" --kv-budget $((512 * 46080)) --default-max-tokens 32 2> "$LOG" &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; rm -f "$LOG"' EXIT

wait_for_health "$SERVER" "$PORT" "$LOG"

status=0
timeout 900 .venv-fuzz/bin/st run "http://127.0.0.1:$PORT/openapi.json" \
    --header "Authorization: Bearer $KEY" \
    --exclude-path /v1/engine/events \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance \
    --max-examples "$EXAMPLES" --generation-deterministic --request-timeout 120 \
    --continue-on-failure || status=$?
if [[ $status != 0 ]]; then
    echo "error: Schemathesis found answers off the spec, or a 5xx (exit $status); the server's log:" >&2
    tail -n 40 "$LOG" >&2
    exit 1
fi
# Still serving after the fuzzing, and never restarted.
python3 - "$PORT" "$KEY" <<'PY'
import sys, urllib.request
port, key = sys.argv[1], sys.argv[2]
request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": "Bearer " + key})
page = urllib.request.urlopen(request, timeout=10).read().decode()
values = {l.split()[0]: float(l.split()[1]) for l in page.splitlines() if l and not l.startswith("#")}
assert values["kvlab_engine_restarts_total"] == 0, values["kvlab_engine_restarts_total"]
print(f"api-fuzz ok: {values['kvlab_connections_accepted_total']:.0f} connections, "
      f"{values['kvlab_requests_rejected_invalid_total']:.0f} requests refused with a 4xx, "
      f"{values['kvlab_requests_finished_total']:.0f} answered, no 5xx, no restart")
PY
