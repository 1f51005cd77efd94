#!/usr/bin/env bash
# The four scheduling policies on one seeded workload (book: serving.md):
#
#   bash scripts/loadtest-policies.sh
#
# For each policy, starts `kvlab serve --policy P` on a free loopback port, replays the
# same `kvlab loadtest` workload against it (Poisson arrivals, short and ~1000-token
# prompts, streamed), saves the report as book/src/figures/data/loadtest_P.json (and the
# command as loadtest_P.cmd), and stops the server. `kvlab loadtest-table` prints the
# chapter's table from those files. Then continuous-chunked again with bf16 weights, and
# with bf16 weights and an int8 KV pool (VARIANTS=no skips them). Last, the composed ladder
# on a copy workload (each prompt a passage given twice, arriving faster): f32 weights,
# bf16 weights, + an int8 pool, + prompt-lookup drafts (ladder_*.json), then the last two
# at twice the rate (busy_*.json), each for its own table (COMPOSE=no skips them). scripts/figures.sh runs this under ONLY=loadtest.
# About 2-4 minutes per policy on an idle 2-core machine with the defaults below; run it
# on an otherwise idle machine: anything else running shows up in the latencies.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/serve-lib.sh

KVLAB=${KVLAB:-target/release/kvlab}
MODEL=${MODEL:-models/smollm2-135m-instruct}
DATA=${DATA:-book/src/figures/data}
REQUESTS=${LOADTEST_REQUESTS:-16}
RATE=${LOADTEST_RATE:-0.5}
SEED=${LOADTEST_SEED:-0}
MIX=${LOADTEST_MIX:-short:3,long:1}
BATCH_TOKENS=${LOADTEST_BATCH_TOKENS:-256}
POLICIES=${POLICIES:-sequential static continuous continuous-chunked}

[[ -x $KVLAB ]] || cargo build --release
if [[ ! -f $MODEL/config.json ]]; then
    echo "error: $MODEL not found: the load test needs the real model (bash scripts/fetch-smollm2.sh)" >&2
    exit 1
fi
mkdir -p "$DATA"

SERVER=
LOG=$(mktemp)
stop_server() {
    if [[ -n $SERVER ]]; then
        kill "$SERVER" 2>/dev/null || true
        wait "$SERVER" 2>/dev/null || true
        SERVER=
    fi
}
trap 'stop_server; rm -f "$LOG"' EXIT

# run_one NAME POLICY [SERVE FLAGS...]: one server, one load test, one saved report.
run_one() {
    local name=$1 policy=$2
    shift 2
    local port
    port=$(free_port)
    local serve=(serve --model "$MODEL" --port "$port" --policy "$policy" --max-batch-tokens "$BATCH_TOKENS" "$@")
    "$KVLAB" "${serve[@]}" 2> "$LOG" &
    SERVER=$!
    wait_for_health "$SERVER" "$port" "$LOG"
    local load=(loadtest --url "http://127.0.0.1:$port" --requests "${RUN_REQUESTS:-$REQUESTS}" --rate "${RUN_RATE:-$RATE}" --seed "$SEED" --prompt-mix "${RUN_MIX:-$MIX}" --json)
    echo "+ kvlab ${serve[*]}"
    echo "+ kvlab ${load[*]}"
    local t0=$SECONDS
    "$KVLAB" "${load[@]}" > "$DATA/$name.json.tmp"
    mv "$DATA/$name.json.tmp" "$DATA/$name.json"
    # The port is whatever was free: the command shows PORT.
    printf 'kvlab %s & kvlab %s\n' "${serve[*]}" "${load[*]}" | sed "s/\b$port\b/PORT/g" > "$DATA/$name.cmd"
    echo "  ($((SECONDS - t0)) s)"
    stop_server
}

for policy in $POLICIES; do
    run_one "loadtest_${policy//-/_}" "$policy"
done
# What the weights and the pool's element buy under the same load, on the chunked engine
# (book: serving.md, "Weights and cache, composed"): bf16 weights in panels, then the same
# with an int8 pool (about 4x the positions in the same --kv-budget).
if [[ ${VARIANTS:-yes} == yes ]]; then
    run_one loadtest_continuous_chunked_bf16 continuous-chunked --dtype bf16
    run_one loadtest_continuous_chunked_bf16_int8kv continuous-chunked --dtype bf16 --kv int8
fi
"$KVLAB" loadtest-table "$DATA"/loadtest_*.json
# Everything at once (book: serving.md, "Weights, cache and drafts, composed"): one line per
# addition on the same copy workload, at a rate the engine keeps up with (ladder_*.json);
# then the last two lines again at twice the rate, where the engine is busy (busy_*.json).
if [[ ${COMPOSE:-yes} == yes ]]; then
    export RUN_REQUESTS=${COMPOSE_REQUESTS:-32} RUN_MIX=copy:1
    rate=${COMPOSE_RATE:-1}
    RUN_RATE=$rate
    run_one ladder_1_f32 continuous-chunked
    run_one ladder_2_bf16 continuous-chunked --dtype bf16
    run_one ladder_3_bf16_int8kv continuous-chunked --dtype bf16 --kv int8
    run_one ladder_4_bf16_int8kv_ngram continuous-chunked --dtype bf16 --kv int8 --speculative ngram --draft-len 4
    RUN_RATE=$(python3 -c "print(2 * $rate)")
    run_one busy_1_bf16_int8kv continuous-chunked --dtype bf16 --kv int8
    run_one busy_2_bf16_int8kv_ngram continuous-chunked --dtype bf16 --kv int8 --speculative ngram --draft-len 4
    "$KVLAB" loadtest-table "$DATA"/ladder_*.json
    "$KVLAB" loadtest-table "$DATA"/busy_*.json
fi
