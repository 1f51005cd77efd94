#!/usr/bin/env python3
"""The serving side-by-side (scripts/serving-side-by-side.sh) as one Markdown table.

    python3 scripts/serving_table.py book/src/figures/data/serving_llamacpp.jsonl
    python3 scripts/serving_table.py book/src/figures/data/serving_guidellm.jsonl

One row per weight format and number of requests in flight: each server's output tokens/s
(the rounds' lowest-highest), their ratio (of the means), and the latencies `vllm bench
serve` reports (TTFT, ITL, TPOT, E2EL; p50 and p99 in ms, the mean over rounds), then how
many requests got the same greedy text from both servers (the first round; `kvlab loadtest`
records the texts, GuideLLM's lines do not).

GuideLLM measures no ITL in vLLM's sense (every gap between two streamed chunks): what it
calls inter-token latency is one value per request, (last token - first token) / (tokens -
1), vLLM's TPOT. Its lines get TTFT, TPOT (p50 and p99) and E2EL columns under vLLM's names.
"""
import json
import sys
from collections import defaultdict


def span(values, digits=1):
    lo, hi = min(values), max(values)
    a, b = f"{lo:.{digits}f}", f"{hi:.{digits}f}"
    return a if a == b else f"{a}-{b}"


def mean(values):
    return sum(values) / len(values)


def main(path):
    runs = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    if not runs:
        sys.exit(f"error: {path} holds no runs: run bash scripts/serving-side-by-side.sh")
    by = defaultdict(list)  # (dtype, n, is_kvlab) -> reports
    kvlab_name = next(r["server"] for r in runs if r["server"].startswith("kvlab"))
    for r in runs:
        by[(r["dtype"], r["concurrency"], r["server"].startswith("kvlab"))].append(r)
    dtypes = sorted({r["dtype"] for r in runs}, key=["f32", "w8a8"].index)
    levels = sorted({r["concurrency"] for r in runs})
    lat = lambda rs, key, p: mean([r[key][p] for r in rs])
    texts = "per_request" in runs[0]
    guidellm = runs[0].get("client", "").startswith("guidellm")
    latencies = ("TTFT p50 / p99 ms (llama · kvlab) | TPOT p50 / p99 ms (llama · kvlab) | "
                 if guidellm else
                 "TTFT p50 / p99 ms (llama · kvlab) | ITL p50 / p99 ms (llama · kvlab) | "
                 "TPOT p50 ms (llama · kvlab) | ")
    print(f"| weights | in flight | llama-server tok/s | {kvlab_name} tok/s | kvlab / llama | "
          f"{latencies}E2EL p50 ms (llama · kvlab) |" + (" same text |" if texts else ""))
    print("|---|---:|---:|---:|---:|" + "---|" * (3 if guidellm else 4) + ("---:|" if texts else ""))
    for dtype in dtypes:
        for n in levels:
            llama, kvlab = by[(dtype, n, False)], by[(dtype, n, True)]
            if not llama or not kvlab:
                continue
            lt = [r["output_tokens_per_s"] for r in llama]
            kt = [r["output_tokens_per_s"] for r in kvlab]
            both = lambda key, p: f"{lat(llama, key, p):.0f} · {lat(kvlab, key, p):.0f}"
            same = ""
            if texts:
                first = lambda rs: min(rs, key=lambda r: r["round"])["per_request"]
                pairs = list(zip(first(llama), first(kvlab)))
                same = f" {sum(a['text'] == b['text'] for a, b in pairs)}/{len(pairs)} |"
            name = "w8a8 / Q8_0" if dtype == "w8a8" else dtype
            gaps = (f"{lat(llama, 'inter_token_ms', 'p50'):.1f} · "
                    f"{lat(kvlab, 'inter_token_ms', 'p50'):.1f} / {both('inter_token_ms', 'p99')} | ")
            if not guidellm:
                gaps += f"{lat(llama, 'tpot_ms', 'p50'):.1f} · {lat(kvlab, 'tpot_ms', 'p50'):.1f} | "
            print(f"| {name} | {n} | {span(lt)} | {span(kt)} | {mean(kt) / mean(lt):.2f}x | "
                  f"{both('ttft_ms', 'p50')} / {both('ttft_ms', 'p99')} | {gaps}"
                  f"{both('e2e_ms', 'p50')} |{same}")
    rounds = max(r["round"] for r in runs)
    requests = runs[0]["requests"]
    if texts:
        load = (f"{requests} requests per run (`short`: 20-60 prompt tokens, 16-64 out, greedy, "
                "ignore_eos), N clients each sending its next request when its last is done "
                "(`kvlab loadtest --concurrency N`)")
        same = (" *same text*: requests whose greedy text was the same from both servers "
                "(first round).")
    else:
        load = (f"{requests} requests per run, {runs[0]['client']} with N concurrent streams "
                "of synthetic prompts (40 tokens, 32 out); TPOT is what GuideLLM calls "
                "inter-token latency, one value per request: (last token - first token) / "
                "(tokens - 1)")
        same = ""
    print(f"\n{rounds} interleaved rounds, {load}; same machine, same threads, loopback. "
          "A range is the rounds' lowest and highest; latencies are the rounds' mean." + same +
          " llama.cpp keeps its KV cache in f16, kvlab in f32.")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: serving_table.py FILE.jsonl")
    main(sys.argv[1])
