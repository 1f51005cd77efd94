#!/usr/bin/env bash
# The live view in a real browser: `bash scripts/browser-test.sh` (SCREENSHOTS=1 also writes
# book/src/figures/live-view.png and live-view-replay.png).
#
# Installs Debian's chromium when /usr/bin/chromium is missing and the pinned playwright-core
# (tests/browser/package-lock.json) when tests/browser/node_modules is, starts
# `target/release/kvlab serve` on a free loopback port with a random API key and
# `--record`, and runs tests/browser/live-view.mjs against it: the page drawn during a small
# load, the page against /metrics once idle, and the recording replayed. The server stops
# whatever happens. Bounded: 300 s for the server to come up, 180 s for the test.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

KVLAB=${KVLAB:-target/release/kvlab}
MODEL=${MODEL:-models/smollm2-135m-instruct}

if [[ ! -x /usr/bin/chromium ]]; then
    SUDO=; [[ $(id -u) == 0 ]] || SUDO=sudo
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq chromium > /dev/null
fi
if [[ ! -d tests/browser/node_modules ]]; then
    (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)
fi
[[ -x $KVLAB ]] || cargo build --release
[[ -d $MODEL ]] || { echo "no model at $MODEL: run bash scripts/fetch-smollm2.sh" >&2; exit 1; }

source scripts/serve-lib.sh
PORT=$(free_port)
WORK=$(mktemp -d)
LOG=$WORK/serve.log
RECORDING=$WORK/recording.json
KVLAB_API_KEY=sk-kvlab-$(python3 -c 'import secrets; print(secrets.token_hex(16))')
export KVLAB_API_KEY
# A pool of 128 blocks: the load fills a visible part of it (the default pool has 1024).
BLOCK_BYTES=$(( 16 * 2 * 30 * 3 * 64 * 4 ))  # 16 positions of SmolLM2-135M's K and V in f32
"$KVLAB" serve --model "$MODEL" --port "$PORT" --record "$RECORDING" --kv-budget $(( 128 * BLOCK_BYTES )) 2> "$LOG" &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; rm -rf "$WORK"' EXIT

wait_for_health "$SERVER" "$PORT" "$LOG"

status=0
RECORDING=$RECORDING KVLAB_BIN=$KVLAB timeout 180 \
    node tests/browser/live-view.mjs "$PORT" "$(basename "$MODEL")" || status=$?
if [[ $status != 0 ]]; then
    [[ $status == 124 ]] && echo "error: the browser test ran past 180 s" >&2
    echo "--- kvlab serve's log:" >&2
    tail -n 40 "$LOG" >&2
    exit "$status"
fi
