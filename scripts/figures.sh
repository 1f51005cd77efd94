#!/usr/bin/env bash
# Measures what the book's figures show, on this machine, and draws them.
#
#   bash scripts/figures.sh
#
# Runs every experiment with --json, saves each result (and the exact command, as
# NAME.cmd) under book/src/figures/data/, then `kvlab plot` draws every figure with
# plotters (book/src/figures/NAME.svg) and writes its caption (NAME.md: what is plotted,
# the numbers, the commands, machine, date and commit), which the pages include.
#
# About 27 minutes on a 2-core machine with SmolLM2-135M (1634 s in the last full run:
# the naive path and the long contexts are the slow part, on purpose). Run it on an
# otherwise idle machine: anything else running shows up in the timings. Bigger runs through the variables below, e.g.
#   PREFILL=16,64,256,1024 CONTEXTS=16,64,256,1024 REPS=5 bash scripts/figures.sh
# Only some of the experiments (by the name of their data file, comma-separated), then
# every figure whose data is there is redrawn:
#   ONLY=spec_sweep bash scripts/figures.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

KVLAB=${KVLAB:-target/release/kvlab}
MODEL=${MODEL:-models/smollm2-135m-instruct}
PREFILL=${PREFILL:-16,32,64,128,256,512,1024}
CONTEXTS=${CONTEXTS:-16,64,128,256,512,1024}
REPS=${REPS:-3}
LONG_CONTEXTS=${LONG_CONTEXTS:-1,1024,2048,4096,6000,8000}
COMPARE_PROMPT_LEN=${COMPARE_PROMPT_LEN:-32}
COMPARE_NEW=${COMPARE_NEW:-96}
TRACE_NEW=${TRACE_NEW:-256}
PREFIX_SHARED=${PREFIX_SHARED:-768}
PREFIX_REQUESTS=${PREFIX_REQUESTS:-4}
CHAT_NEW=${CHAT_NEW:-48}
CAPACITY_BUDGETS=${CAPACITY_BUDGETS:-64MiB 128MiB 256MiB 512MiB 1GiB 2GiB 4GiB}
ATTENTION_PROMPT=${ATTENTION_PROMPT:-The cat sat on the mat because it was tired. The dog slept on the rug because it was cold.}
ATTENTION_LAYER=${ATTENTION_LAYER:-3}
ATTENTION_HEAD=${ATTENTION_HEAD:-0}
SPEC_DRAFTERS=${SPEC_DRAFTERS:-ngram,early-exit:20,bf16}
SPEC_DRAFT_LENS=${SPEC_DRAFT_LENS:-1,2,4,8}
SPEC_NEW=${SPEC_NEW:-48}
EVAL_TEXT=${EVAL_TEXT:-tests/fixtures/eval/apache-2.0-head.txt}
EVAL_POLICIES=${EVAL_POLICIES:-full int8 int4 int4-per-token}
BATCH_CONCURRENCY=${BATCH_CONCURRENCY:-1,2,4,8,16}
BATCH_NEW=${BATCH_NEW:-32}
PARETO_TEXT=${PARETO_TEXT:-tests/fixtures/eval/gpl-3-head.txt}
PARETO_TOKENS=${PARETO_TOKENS:-1024}
PARETO_WINDOW=${PARETO_WINDOW:-256}
EVICT_CONTEXTS=${EVICT_CONTEXTS:-512,1024,1536,2048}
EVICT_REPS=${EVICT_REPS:-21}
DISAGG_REQUESTS=${DISAGG_REQUESTS:-12}
DISAGG_RATE=${DISAGG_RATE:-2}
ONLY=${ONLY:-}
OUT=${OUT:-book/src/figures}
DATA=$OUT/data

if [[ ! -x $KVLAB ]]; then
    echo "building kvlab (release)..."
    cargo build --release
fi
if [[ ! -f $MODEL/config.json ]]; then
    echo "error: $MODEL not found: the figures need the real model (bash scripts/fetch-smollm2.sh)" >&2
    exit 1
fi
mkdir -p "$DATA"

# The command as it can be pasted into a shell (arguments with spaces quoted).
quote() {
    local quoted="kvlab"
    for arg in "$@"; do
        if [[ $arg == *" "* ]]; then quoted+=" \"$arg\""; else quoted+=" $arg"; fi
    done
    printf '%s' "$quoted"
}

# selected NAME: whether ONLY is empty or names NAME, or a prefix of it before "_"
# (ONLY=spec_sweep selects spec_sweep_fix_typos and spec_sweep_story).
selected() {
    [[ -z $ONLY ]] && return 0
    local want wanted
    IFS=, read -ra wanted <<< "$ONLY"
    for want in "${wanted[@]}"; do
        [[ $1 == "$want" || $1 == "$want"_* ]] && return 0
    done
    return 1
}

# measure FILE [< STDIN] -- ARGS...: runs kvlab ARGS, saves stdout as $DATA/FILE and the
# command as $DATA/NAME.cmd (appending with APPEND=1: several runs into one .jsonl).
measure() {
    local file=$1 stdin=/dev/null
    shift
    if [[ $1 == "<" ]]; then stdin=$2; shift 2; fi
    shift # --
    local name=${file%%.*} cmd
    if ! selected "$name"; then return 0; fi
    cmd=$(quote "$@")
    [[ $stdin != /dev/null ]] && cmd+=" < $stdin"
    echo "+ $cmd"
    local t0=$SECONDS
    if [[ ${APPEND:-0} == 1 ]]; then
        "$KVLAB" "$@" < "$stdin" | tr -d '\n' >> "$DATA/$file"
        echo >> "$DATA/$file"
        printf '%s\n' "$cmd" >> "$DATA/$name.cmd"
    else
        "$KVLAB" "$@" < "$stdin" > "$DATA/$file.tmp"
        mv "$DATA/$file.tmp" "$DATA/$file"
        printf '%s\n' "$cmd" > "$DATA/$name.cmd"
    fi
    echo "  ($((SECONDS - t0)) s)"
    MEASURED=$((MEASURED + 1))
}
MEASURED=0

START=$SECONDS
# TTFT vs prompt length, one decode step of each path at each context, both roofs.
measure bench.json -- bench --model "$MODEL" --prefill "$PREFILL" --contexts "$CONTEXTS" --reps "$REPS" --json
# The weight formats, layouts and thread scaling: f32 in rows (the plain twin) and in
# panels, bf16 in panels, int8 blocks, at 1 and 2 threads, one JSON line per run (the
# README's and roofline.md's weight-format and thread figures).
selected bench_dtypes && rm -f "$DATA/bench_dtypes.jsonl" "$DATA/bench_dtypes.cmd"
for threads in 1 2; do
    for weights in "--dtype f32 --layout rows" "--dtype f32" "--dtype bf16" "--dtype int8"; do
        read -ra weights_args <<< "$weights"
        APPEND=1 measure bench_dtypes.jsonl -- bench --model "$MODEL" --prefill 128,512 --contexts 1,512 --reps "$REPS" --threads "$threads" "${weights_args[@]}" --json
    done
done
# use_cache=True vs use_cache=False on one request. Random weights: the request runs to
# max_new_tokens instead of stopping at an end-of-turn token.
measure compare.json -- compare --random-weights --prompt-len "$COMPARE_PROMPT_LEN" --max-new-tokens "$COMPARE_NEW" --json
# §3.2: a decode step at contexts up to 8000 (MHA, GQA, MQA shapes; synthetic caches),
# and the generation each sums to (book: kv-size.md).
measure long_context.json -- gqa --sweep "$LONG_CONTEXTS" --reps "$REPS" --json
# The KV cache filling token by token.
measure generate.json -- generate --model "$MODEL" --chat --prompt "Explain in a few sentences what a KV cache is." --max-new-tokens 64 --json
# What reserving the cache for prompt + max_new_tokens costs before the first token (§3.3,
# book: cache-layouts.md): the same short request asking for 4000 and for 16 new tokens.
measure reserve_4000.json -- generate --model "$MODEL" --chat --prompt "Say hi." --max-new-tokens 4000 --json
measure reserve_16.json -- generate --model "$MODEL" --chat --prompt "Say hi." --max-new-tokens 16 --json
# The same request in every cache layout (its own CSV and SVG go to target/, unused).
measure trace.json -- trace --model "$MODEL" --chat --prompt "Explain in a few sentences what a KV cache is." --max-new-tokens "$TRACE_NEW" --out target/figures-trace --json
# Requests that fit in each budget: one JSON line per budget.
selected capacity && rm -f "$DATA/capacity.jsonl" "$DATA/capacity.cmd"
for budget in $CAPACITY_BUDGETS; do
    APPEND=1 measure capacity.jsonl -- capacity --budget "$budget" --json
done
# Requests sharing a system prompt, without and with prefix caching.
measure prefix.json -- prefix --model "$MODEL" --requests "$PREFIX_REQUESTS" --shared-len "$PREFIX_SHARED" --json
# Six turns of chat, keeping the cache between turns, then recomputing every turn.
measure chat_reuse.jsonl "<" prompts/multi_turn.txt -- chat --model "$MODEL" --max-new-tokens "$CHAT_NEW" --json
measure chat_no_reuse.jsonl "<" prompts/multi_turn.txt -- chat --model "$MODEL" --max-new-tokens "$CHAT_NEW" --no-reuse --json
# One head's attention probabilities and every layer's attention sink.
measure attention.json -- attention-map --model "$MODEL" --prompt "$ATTENTION_PROMPT" --layer "$ATTENTION_LAYER" --head "$ATTENTION_HEAD" --json
# The seed's 7B figures and SmolLM2's: cheap, for the book to cite.
measure kv_size_7b.json -- kv-size --layers 32 --kv-heads 32 --head-dim 128 --seq-len 2048 --json
measure kv_size_smollm2.json -- kv-size --layers 30 --kv-heads 3 --head-dim 64 --seq-len 2048 --json
# §3.1: the cache against the weights, for three shapes (one JSON line each): SmolLM2 from
# its config, and two shapes from their model cards (Llama-2-7B, MHA; Llama-3-8B, GQA).
selected kv_vs_weights && rm -f "$DATA/kv_vs_weights.jsonl" "$DATA/kv_vs_weights.cmd"
APPEND=1 measure kv_vs_weights.jsonl -- kv-size --model "$MODEL" --name "SmolLM2-135M (GQA 9/3)" --seq-len 32768 --json
APPEND=1 measure kv_vs_weights.jsonl -- kv-size --layers 32 --kv-heads 32 --head-dim 128 --params 6738415616 --name "Llama-2-7B (MHA)" --seq-len 32768 --json
APPEND=1 measure kv_vs_weights.jsonl -- kv-size --layers 32 --kv-heads 8 --head-dim 128 --params 8030261248 --name "Llama-3-8B (GQA 32/8)" --seq-len 32768 --json
# Gemma 3 270M from its config: MQA (4 query heads, 1 KV head) and 15 local layers of 18.
APPEND=1 measure kv_vs_weights.jsonl -- kv-size --model models/gemma-3-270m --name "Gemma 3 270M (MQA 4/1, hybrid)" --seq-len 32768 --json
# TPOT against the context to 8k for both real models, each on its own cache (Gemma 3:
# a ring per local layer), one JSON line each.
selected tpot_context && rm -f "$DATA/tpot_context.jsonl" "$DATA/tpot_context.cmd"
APPEND=1 measure tpot_context.jsonl -- bench-context --model "$MODEL" --contexts "$LONG_CONTEXTS" --reps "$REPS" --json
APPEND=1 measure tpot_context.jsonl -- bench-context --model models/gemma-3-270m --contexts "$LONG_CONTEXTS" --reps "$REPS" --json
# Speculative decoding: every drafter at every draft length, on an input-grounded prompt
# (the answer copies the input) and on an open-ended one.
measure spec_sweep_fix_typos.json -- spec-sweep --model "$MODEL" --prompt-file prompts/fix-typos.txt --chat --drafters "$SPEC_DRAFTERS" --draft-lens "$SPEC_DRAFT_LENS" --max-new-tokens "$SPEC_NEW" --json
measure spec_sweep_story.json -- spec-sweep --model "$MODEL" --prompt-file prompts/story.txt --chat --drafters "$SPEC_DRAFTERS" --draft-lens "$SPEC_DRAFT_LENS" --max-new-tokens "$SPEC_NEW" --json
# KV policies on one text, teacher-forced (kvlab eval): perplexity, top-1 agreement and KL
# against the full cache, and KV bytes. One file per policy, eval_<policy>.json (dashes
# become underscores), each one EvalReport: the eviction policies add theirs the same way.
for kv in $EVAL_POLICIES; do
    measure "eval_${kv//-/_}.json" -- eval --model "$MODEL" --text-file "$EVAL_TEXT" --kv "$kv" --json
done
# Serving many requests: tokens/s vs concurrency (continuous batching vs one at a time)
# and the decode stall while a 1000-token prompt is prefilled whole or in chunks.
measure batching.json -- bench-batch --model "$MODEL" --concurrency "$BATCH_CONCURRENCY" --max-tokens "$BATCH_NEW" --json
# The engine on bf16 weights in panels against f32 rows, level by level in one run
# (book: scheduling.md, "Lighter weights in the engine"; data only, no figure).
measure batching_weights.json -- bench-batch --model "$MODEL" --concurrency 8,16 --max-tokens "$BATCH_NEW" --dtype bf16 --against f32:rows --json
# Prompt-lookup speculation in the engine: 4 greedy requests copying a passage their
# prompt gives twice, without and with drafts (book: speculative.md, "In the engine";
# data only, no figure).
measure batching_spec.json -- bench-batch --model "$MODEL" --concurrency 4 --prompt-len 128 --max-tokens 64 --speculative ngram --draft-len 4 --json
# Prefill/decode disaggregation over loopback TCP vs one colocated engine, same seeded
# workload (book: serving.md; data only, no figure). ONLY=disagg runs only this.
measure disagg.json -- bench-disagg --model "$MODEL" --requests "$DISAGG_REQUESTS" --rate "$DISAGG_RATE" --seed 0 --json

# kvlab serve under each scheduling policy, one seeded workload over HTTP (book: serving.md):
# writes loadtest_<policy>.json and .cmd for the table (`kvlab loadtest-table`) and the
# loadtest_stalls figure. ONLY=loadtest runs only this.
if selected loadtest; then
    echo "+ bash scripts/loadtest-policies.sh"
    KVLAB=$KVLAB MODEL=$MODEL DATA=$DATA bash scripts/loadtest-policies.sh
fi
# The live view's replays (book: live-view.md, and the chapters that embed them): each
# scripted run of the engine recorded as a Chrome trace in book/src/replays/, its numbers
# in data/replay_*.json (data only, no figure). ONLY=replay_pool_int8 runs one.
REPLAYS=${REPLAYS:-book/src/replays}
mkdir -p "$REPLAYS"
for scenario in prefix-sharing stall-continuous stall-chunked preemption pool-f32 pool-int8 pool-sliding; do
    measure "replay_${scenario//-/_}.json" -- record "$scenario" --model "$MODEL" --out "$REPLAYS/$scenario.json" --json
done
# The live view's screenshots (book/src/figures/live-view.png, live-view-replay.png), taken
# by the browser test during its own load. ONLY=live_view runs only this.
if selected live_view; then
    echo "+ SCREENSHOTS=1 bash scripts/browser-test.sh"
    SCREENSHOTS=1 KVLAB=$KVLAB MODEL=$MODEL bash scripts/browser-test.sh
fi
# Every KV policy on the same text, teacher-forced against the full cache (the Pareto
# figure and `kvlab eval-table`): one JSON line per policy. The window and H2O keep
# PARETO_WINDOW positions, and H2O also 20% of the text (10% heavy + 10% recent, as H2O).
selected eval_pareto && rm -f "$DATA/eval_pareto.jsonl" "$DATA/eval_pareto.cmd"
h2o_small=$((PARETO_TOKENS / 5))
for kv in "full" "int8" "int4" "int4-per-token" \
    "window --window $PARETO_WINDOW --sinks 0" "window --window $PARETO_WINDOW --sinks 4" \
    "h2o --budget $PARETO_WINDOW --recent $((PARETO_WINDOW / 2))" \
    "h2o --budget $h2o_small --recent $((h2o_small / 2))"; do
    # shellcheck disable=SC2086 # $kv is the policy and its options, split on purpose
    APPEND=1 measure eval_pareto.jsonl -- eval --model "$MODEL" --text-file "$PARETO_TEXT" --max-tokens "$PARETO_TOKENS" --kv $kv --json
done
# One decode step at each context: a sliding window's cost stays flat, the full cache's grows.
measure eval_evict_speed.json -- evict-speed --model "$MODEL" --text-file "$PARETO_TEXT" --window "$PARETO_WINDOW" --sinks 4 --contexts "$EVICT_CONTEXTS" --reps "$EVICT_REPS" --json

# When, and from which commit (the working tree may differ from it: "+dirty").
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- src 2>/dev/null || rev+="+dirty"
printf '{"date": "%s", "commit": "%s"}\n' "$(date -u +%Y-%m-%d)" "$rev" > "$DATA/run.json"
echo "measurements took $((SECONDS - START)) s"

if [[ -z $ONLY ]]; then
    "$KVLAB" plot --data "$DATA" --out "$OUT"
else
    # Only the figures drawn from what was just measured (run.json now names this run,
    # so the other captions are left as they are).
    figures=()
    while read -r figure inputs; do
        for input in ${inputs//,/ }; do
            if selected "${input%%.*}"; then
                figures+=("$figure")
                break
            fi
        done
    done < <("$KVLAB" plot --list)
    if [[ ${#figures[@]} == 0 && $MEASURED -gt 0 ]]; then
        echo "ONLY=$ONLY: data only, no figure is drawn from it"
        exit 0
    fi
    if [[ ${#figures[@]} == 0 ]]; then
        echo "error: ONLY=$ONLY selects no figure (see kvlab plot --list)" >&2
        exit 1
    fi
    "$KVLAB" plot --data "$DATA" --out "$OUT" "${figures[@]}"
fi
