#!/usr/bin/env bash
# `kvlab serve` and llama.cpp's `llama-server` under the same load, on the same machine,
# the same weights, the same threads, loopback only: output tokens/s, TTFT, ITL, TPOT and
# E2EL (the names `vllm bench serve` uses) at 1, 4, 8 and 16 requests in flight, and
# whether the two servers' greedy texts agree.
#
#   bash scripts/llamacpp-side-by-side.sh          # builds llama.cpp, then runs this
#   PARTS=serving bash scripts/llamacpp-side-by-side.sh   # this part only
#
# Run by scripts/llamacpp-side-by-side.sh (which builds llama-server and the GGUFs), with
# LLAMA_CPP_BIN and CACHE set. The load is `kvlab loadtest --concurrency N`: N clients,
# each sending its next request when its last is done, REQUESTS seeded requests of the
# `short` kind (20-60 prompt tokens, 16-64 out, greedy, ignore_eos) sent as token ids, so
# both servers read the same tokens. llama-server gets `-np N` slots (continuous batching
# is its default) and N x 1024 positions of context; `kvlab serve` one engine for every N.
# Formats: f32 (F32 GGUF) and w8a8 (Q8_0 GGUF: llama.cpp's own arithmetic). Rounds
# alternate the two servers. Writes book/src/figures/data/serving_llamacpp.jsonl (one
# line per run) and serving_llamacpp.md (scripts/serving_table.py).
#
# A second client neither project wrote: GuideLLM (vLLM's benchmark tool, from PyPI into
# $CACHE/guidellm-venv, offline: the tokenizer is the model folder's), N concurrent
# streams of synthetic prompts of 40 tokens and 32 out, against the same servers while
# they are up: serving_guidellm.jsonl and serving_guidellm.md. CLIENTS="kvlab" leaves it
# out. About 15 minutes with both clients.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

KVLAB=${KVLAB:-target/release/kvlab}
MODEL=${MODEL:-models/smollm2-135m-instruct}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-2}
REQUESTS=${REQUESTS:-32}
LEVELS=${LEVELS:-1 4 8 16}
CACHE=${CACHE:-models/.cache/llamacpp}
LLAMA_CPP_BIN=${LLAMA_CPP_BIN:-$CACHE/build/bin}
DATA=book/src/figures/data
KVLAB_PORT=${KVLAB_PORT:-18080}
LLAMA_PORT=${LLAMA_PORT:-18081}
CLIENTS=${CLIENTS:-kvlab guidellm}
GUIDELLM_VERSION=0.8.1
GUIDELLM=$CACHE/guidellm-venv/bin/guidellm

if [[ ! -x $LLAMA_CPP_BIN/llama-server ]]; then
    echo "error: $LLAMA_CPP_BIN/llama-server is missing: run bash scripts/llamacpp-side-by-side.sh, which builds it" >&2
    exit 1
fi
for t in F32 Q8_0; do
    if [[ ! -f $CACHE/smollm2-$t.gguf ]]; then
        echo "error: $CACHE/smollm2-$t.gguf is missing: run bash scripts/llamacpp-side-by-side.sh, which makes it" >&2
        exit 1
    fi
done

server_pid=
stop_server() {
    if [[ -n $server_pid ]]; then
        kill "$server_pid" 2> /dev/null || true
        wait "$server_pid" 2> /dev/null || true
        server_pid=
    fi
}
trap stop_server EXIT

# Waits until URL/health answers 200, or says which log to read.
wait_ready() {
    local url=$1 log=$2
    for _ in $(seq 1 300); do
        if curl -sf "$url/health" > /dev/null 2>&1; then
            return 0
        fi
        if ! kill -0 "$server_pid" 2> /dev/null; then
            echo "error: the server stopped before it was ready; the end of $log:" >&2
            tail -n 15 "$log" >&2
            exit 1
        fi
        sleep 0.2
    done
    echo "error: $url did not answer /health within 60 s; see $log" >&2
    exit 1
}

# One load test: server name, format, concurrency, round, URL.
measure() {
    local server=$1 dtype=$2 n=$3 round=$4 url=$5
    "$KVLAB" loadtest --url "$url" --requests "$REQUESTS" --concurrency "$n" --prompt-mix short:1 \
        --seed "$round" --json |
        python3 -c 'import json, sys
r = json.load(sys.stdin)
r["server"], r["dtype"], r["round"] = sys.argv[1], sys.argv[2], int(sys.argv[3])
for q in r["per_request"]:
    q.pop("token_ms")  # the timeline is in the percentiles; keep the file small
print(json.dumps(r))' "$server" "$dtype" "$round" >> "$DATA/serving_llamacpp.jsonl"
}

# GuideLLM: N concurrent streams, 32 requests of 40 prompt tokens and 32 out; one line of
# the figures vLLM's tools report (throughput = output tokens / duration).
guidellm_measure() {
    local server=$1 dtype=$2 n=$3 round=$4 url=$5 out=$CACHE/guidellm-run.json
    rm -f "$out"
    if ! HF_HUB_OFFLINE=1 "$GUIDELLM" run --backend "kind=openai_http,target=$url" \
        --profile "kind=concurrent,streams=$n" \
        --data kind=synthetic_text,prompt_tokens=40,output_tokens=32 \
        --tokenizer "kind=huggingface_auto,model=$(realpath "$MODEL")" \
        --constraint kind=max_requests,count=32 --output "kind=json,path=$out" \
        --disable-progress --disable-console > "$CACHE/guidellm.log" 2>&1; then
        echo "error: guidellm failed; the end of $CACHE/guidellm.log:" >&2
        tail -n 15 "$CACHE/guidellm.log" >&2
        exit 1
    fi
    # GuideLLM's names are not vllm bench serve's (guidellm/schemas/base/request_stats.py):
    # its inter_token_latency_ms is per request, (last token - first token) / (tokens - 1),
    # which vLLM calls TPOT; its time_per_output_token_ms counts the first token's wait
    # too, (last token - request start) / tokens. They are kept here under GuideLLM's own
    # meaning (inter_token_ms, tpot_ms); scripts/serving_table.py shows the first as TPOT.
    python3 -c 'import json, sys
b = json.load(open(sys.argv[1]))["benchmarks"][0]
m = b["metrics"]
ok = lambda key: m[key]["successful"]
pct = lambda key, p: ok(key)["percentiles"][p]
print(json.dumps({"client": "guidellm " + sys.argv[6], "server": sys.argv[2], "dtype": sys.argv[3],
    "concurrency": int(sys.argv[4]), "round": int(sys.argv[5]),
    "requests": m["request_totals"]["successful"], "failed": m["request_totals"]["errored"],
    "output_tokens_per_s": ok("output_token_count")["total_sum"] / b["duration"],
    "ttft_ms": {"p50": pct("time_to_first_token_ms", "p50"), "p99": pct("time_to_first_token_ms", "p99")},
    "inter_token_ms": {"p50": pct("inter_token_latency_ms", "p50"), "p99": pct("inter_token_latency_ms", "p99")},
    "tpot_ms": {"p50": pct("time_per_output_token_ms", "p50")},
    "e2e_ms": {"p50": 1e3 * pct("request_latency", "p50")}}))' \
        "$out" "$server" "$dtype" "$n" "$round" "$GUIDELLM_VERSION" >> "$DATA/serving_guidellm.jsonl"
}

# Both clients against the server now up.
clients() {
    local server=$1 dtype=$2 n=$3 round=$4 url=$5
    [[ $CLIENTS == *kvlab* ]] && measure "$server" "$dtype" "$n" "$round" "$url"
    [[ $CLIENTS == *guidellm* ]] && guidellm_measure "$server" "$dtype" "$n" "$round" "$url"
    return 0
}

if [[ $CLIENTS == *guidellm* && ! -x $GUIDELLM ]]; then
    python3 -m venv "$CACHE/guidellm-venv"
    "$CACHE/guidellm-venv/bin/pip" install -q "guidellm==$GUIDELLM_VERSION"
fi
mkdir -p "$DATA"
rm -f "$DATA/serving_llamacpp.jsonl" "$DATA/serving_guidellm.jsonl"
cargo build --release --quiet
for round in $(seq 1 "$ROUNDS"); do
    for pair in "f32 F32" "w8a8 Q8_0"; do
        read -r dtype gguf_type <<< "$pair"
        echo "+ round $round, $dtype: kvlab serve"
        RAYON_NUM_THREADS=$THREADS "$KVLAB" serve --model "$MODEL" --dtype "$dtype" \
            --host 127.0.0.1 --port "$KVLAB_PORT" > "$CACHE/kvlab-serve.log" 2>&1 &
        server_pid=$!
        wait_ready "http://127.0.0.1:$KVLAB_PORT" "$CACHE/kvlab-serve.log"
        for n in $LEVELS; do
            clients "kvlab serve $(git rev-parse --short HEAD)" "$dtype" "$n" "$round" "http://127.0.0.1:$KVLAB_PORT"
        done
        stop_server
        echo "+ round $round, $dtype: llama-server"
        for n in $LEVELS; do
            "$LLAMA_CPP_BIN/llama-server" -m "$CACHE/smollm2-$gguf_type.gguf" -t "$THREADS" -tb "$THREADS" \
                -np "$n" -c $((n * 1024)) --host 127.0.0.1 --port "$LLAMA_PORT" > "$CACHE/llama-server.log" 2>&1 &
            server_pid=$!
            wait_ready "http://127.0.0.1:$LLAMA_PORT" "$CACHE/llama-server.log"
            clients "llama-server" "$dtype" "$n" "$round" "http://127.0.0.1:$LLAMA_PORT"
            stop_server
        done
    done
done
cat > "$DATA/serving_llamacpp.cmd" <<CMDS
RAYON_NUM_THREADS=$THREADS kvlab serve --model $MODEL --dtype {f32,w8a8} --host 127.0.0.1 --port $KVLAB_PORT
$LLAMA_CPP_BIN/llama-server -m smollm2-{F32,Q8_0}.gguf -t $THREADS -tb $THREADS -np N -c N*1024 --host 127.0.0.1 --port $LLAMA_PORT
kvlab loadtest --url URL --requests $REQUESTS --concurrency N --prompt-mix short:1 --seed ROUND --json   (N in $LEVELS)
CMDS
if [[ $CLIENTS == *kvlab* ]]; then
    python3 scripts/serving_table.py "$DATA/serving_llamacpp.jsonl" > "$DATA/serving_llamacpp.md"
    cat "$DATA/serving_llamacpp.md"
fi
if [[ $CLIENTS == *guidellm* ]]; then
    echo "guidellm $GUIDELLM_VERSION run --backend kind=openai_http,target=URL --profile kind=concurrent,streams=N --data kind=synthetic_text,prompt_tokens=40,output_tokens=32 --tokenizer kind=huggingface_auto,model=$MODEL --constraint kind=max_requests,count=32 --output kind=json,path=FILE" >> "$DATA/serving_llamacpp.cmd"
    python3 scripts/serving_table.py "$DATA/serving_guidellm.jsonl" > "$DATA/serving_guidellm.md"
    cat "$DATA/serving_guidellm.md"
fi
