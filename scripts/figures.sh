#!/usr/bin/env bash
# Measures what the book's figures show, on this machine, and draws them.
#
#   bash scripts/figures.sh
#
# Runs `kvlab bench`, `kvlab compare` and `kvlab generate` with --json, saves each
# JSON (and the exact command, as NAME.cmd) under book/src/figures/data/, then runs
# scripts/plot.py (Python 3 standard library only) to write book/src/figures/*.svg.
# Each SVG names the machine (from bench's "machine" field) and the command.
#
# On a 2-core machine it takes a few minutes: the naive path is the slow part, on
# purpose. Run it on an otherwise idle machine; anything else running shows up in
# the timings. Override the sizes with the variables below, e.g.
#   PREFILL=16,64,256 CONTEXTS=16,64,256 bash scripts/figures.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

KVLAB=${KVLAB:-target/release/kvlab}
MODEL=${MODEL:-models/smollm2-135m-instruct}
PREFILL=${PREFILL:-16,32,64,128,256,512}
CONTEXTS=${CONTEXTS:-16,32,64,128,256,512}
REPS=${REPS:-3}
COMPARE_PROMPT_LEN=${COMPARE_PROMPT_LEN:-32}
COMPARE_NEW=${COMPARE_NEW:-96}
OUT=${OUT:-book/src/figures}
DATA=$OUT/data

if [[ ! -x $KVLAB ]]; then
    echo "building kvlab (release)..."
    cargo build --release
fi
mkdir -p "$DATA"

# With the real model the bench and the KV trace use it; without it, random weights of
# the same shape (same cost, no text).
if [[ -f $MODEL/config.json ]]; then
    BENCH_MODEL=(--model "$MODEL")
    GEN_INPUT=(--model "$MODEL" --chat --prompt "Explain in a few sentences what a KV cache is.")
else
    echo "note: $MODEL not found, using --random-weights (fetch it with bash scripts/fetch-smollm2.sh)"
    BENCH_MODEL=()
    GEN_INPUT=(--random-weights --prompt-len 40)
fi

# Runs a kvlab command, saving its JSON as $DATA/$1.json and the command as $DATA/$1.cmd.
measure() {
    local name=$1
    shift
    # Quote the arguments that contain spaces, so the .cmd can be pasted into a shell.
    local quoted="kvlab"
    for arg in "$@"; do
        if [[ $arg == *" "* ]]; then quoted+=" \"$arg\""; else quoted+=" $arg"; fi
    done
    echo "+ $quoted"
    local t0=$SECONDS
    "$KVLAB" "$@" > "$DATA/$name.json.tmp"
    mv "$DATA/$name.json.tmp" "$DATA/$name.json"
    printf '%s\n' "$quoted" > "$DATA/$name.cmd"
    echo "  ($((SECONDS - t0)) s)"
}

START=$SECONDS
# TTFT vs prompt length, and one decode step of each path at each context (seed 1.1, 1.2, 2.2).
measure bench bench "${BENCH_MODEL[@]}" --prefill "$PREFILL" --contexts "$CONTEXTS" --reps "$REPS" --json
# use_cache=True vs use_cache=False on one request (seed 2.2, 4.1). Random weights: the
# request runs to max_new_tokens instead of stopping at an end-of-turn token.
measure compare compare --random-weights --prompt-len "$COMPARE_PROMPT_LEN" --max-new-tokens "$COMPARE_NEW" --json
# The KV cache filling token by token (seed 2.3, 4.2).
measure generate generate "${GEN_INPUT[@]}" --max-new-tokens 64 --json
# The seed's 7B figures and SmolLM2's (seed 3.1): cheap, for the book to cite.
measure kv_size_7b kv-size --layers 32 --kv-heads 32 --head-dim 128 --seq-len 2048 --json
measure kv_size_smollm2 kv-size --layers 30 --kv-heads 3 --head-dim 64 --seq-len 2048 --json

# When, and from which commit (the working tree may differ from it: "+dirty").
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- src 2>/dev/null || rev+="+dirty"
echo "$(date -u +%Y-%m-%d), kvlab $rev" > "$DATA/when.txt"
echo "measurements took $((SECONDS - START)) s"

python3 scripts/plot.py "$OUT"
