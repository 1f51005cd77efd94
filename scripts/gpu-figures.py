#!/usr/bin/env python3
"""The GPU check's figures, from the JSON that `kvlab bench --device cuda --json` wrote.

    python3 scripts/gpu-figures.py table FILE.json     the bench as a table (gpu-check.sh prints it)
    python3 scripts/gpu-figures.py record DIR          DIR: what a GPU check left in $OUT (gpu-check.log,
                                                       gpu-bench-*.json, peer-roofs.json) -> the book's record,
                                                       book/src/figures/data/gpu-h200.json and gpu-h200.log
    python3 scripts/gpu-figures.py record-real FILE    FILE: the real-model.json of scripts/gpu-real-model.sh run
                                                       -> book/src/figures/data/gpu-h200-real-model.json
    python3 scripts/gpu-figures.py markdown [--check]  the record -> book/src/figures/gpu_h200.md (the tables
                                                       cuda.md includes); --check (CI): fail if the page differs

The record is what the book's CUDA chapter quotes (`{{#kvlab gpu-h200.json:...}}`). Its commit is
`built_from_commit`, not `commit`: the book's stamps must all name one commit that CI can
re-measure, and no CI machine has a GPU, so this record keeps the commit of the binaries that
ran on the GPU, and the chapter says which one.

No third-party module: it runs on the GPU machine's python3 as on this one.
"""
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "book" / "src" / "figures" / "data"

# Short names of the bench's kernel plans, for `rows[id=PLAN@CONTEXT]` in the book.
PLAN = {
    (False, False, "v1", "v2"): "v1",
    (False, False, "v2", "v2"): "v2",
    (False, False, "v3", "v3"): "v3",
    (True, False, "v2", "v3"): "fused",
    (True, True, "v2", "v3"): "graphs",
}


def table(path):
    r = json.load(open(path))
    roof = r["roof"]
    print(f"   {r['model']} ({r['n_params']:,} params) on {r['device']}")
    print(
        f"   roofs measured by kvlab (src/cuda/roof.rs): read {roof['read_bytes_per_s'] / 1e9:.0f} GB/s "
        f"(data sheet {r['datasheet_bytes_per_s'] / 1e9:.0f}), f32 FMA {roof['fma_flop_per_s'] / 1e12:.1f} TFLOP/s; "
        f"launch {r['launch_latency_us']:.2f} us; {r['decode_tokens']} tokens decoded per row"
    )
    head = ("wts", "kernels", "ctx", "prefill ms", "tok/s", "of FMA", "decode ms", "tok/s",
            "argmax tok/s", "naive ms", "gap", "MB/tok", "of read", "launch", "of launch roof")
    rows = []
    for w in r["rows"]:
        rows.append((
            w["weights"], w["kernels"], str(w["context"]),
            f"{w['prefill_ms']:.2f}", f"{w['prefill_tok_s']:.0f}", f"{100 * w['prefill_flop_fraction']:.1f}%",
            f"{w['decode_ms']:.3f}", f"{w['decode_tok_s']:.0f}", f"{w['decode_device_argmax_tok_s']:.0f}",
            f"{w['naive_step_ms']:.2f}", f"{w['naive_step_ms'] / w['decode_ms']:.0f}x",
            f"{w['bytes_per_token'] / 1e6:.1f}", f"{100 * w['hbm_fraction']:.1f}%",
            f"{w['launches_per_token']:.0f}", f"{100 * w['launch_fraction']:.1f}%",
        ))
    widths = [max(len(x[i]) for x in [head] + rows) for i in range(len(head))]
    for line in [head] + rows:
        print("   " + "  ".join(c.rjust(widths[i]) if i != 1 else c.ljust(widths[i]) for i, c in enumerate(line)))


def record(folder):
    folder = Path(folder)
    log = (folder / "gpu-check.log").read_text()
    commit = re.search(r"built from kvlab (\S+)", log)
    when = re.search(r"== kvlab GPU check, (\d{4}-\d\d-\d\d) ", log)
    gpu = re.search(r"^   1\. GPU: (.*)$", log, re.M)
    if not (commit and when and gpu):
        sys.exit("gpu-figures: the log does not say its commit, date and GPU: is it gpu-check.sh's?")
    if "+" in commit.group(1):
        sys.exit(f"gpu-figures: the binaries were built from {commit.group(1)}, a tree with uncommitted changes")
    results = [tuple(int(x) for x in m) for m in re.findall(r"test result: ok\. (\d+) passed; (\d+) failed", log)]
    if re.search(r"test result: FAILED|FAIL", log.split("== summary")[-1]):
        sys.exit("gpu-figures: the check's summary reports a failure: the book records passing runs only")
    matmul = [
        {"id": f"{v.lower()}-{d.lower()}-{n}x{i}x{o}",
         "version": v.lower(), "weights": d.lower(), "rows": int(n), "d_in": int(i), "d_out": int(o),
         "us": float(us), "weight_gb_s": float(gb)}
        for v, d, n, i, o, us, gb in re.findall(
            r"matmul (V\d) (F32|Bf16) n +(\d+) (\d+)x(\d+): +([\d.]+) µs, +[\d.]+ GFLOP/s, weights at +([\d.]+) GB/s", log)
    ]
    demos = {}
    for dtype, body in re.findall(r"-- --gpu-dtype (\w+)\n(.*?)(?=\n-- --gpu-dtype|\n== summary)", log, re.S):
        tpot = dict(re.findall(r"\[(Naive|Cached)\].*?TPOT ([\d.]+) ms", body))
        speedup = re.search(r"speedup \(naive total / cached total\): ([\d.]+)x", body)
        demos[dtype] = {"naive_tpot_ms": float(tpot["Naive"]), "cached_tpot_ms": float(tpot["Cached"]),
                        "speedup": float(speedup.group(1)),
                        "identical_tokens": "identical tokens: true" in body}
    # GPU f32 logits against the CPU's, SmolLM2-shaped random model (tests/cuda_paths.rs).
    diffs = [(float(d), float(t)) for d, t in re.findall(
        r"SmolLM2 shape f32 \S+, step \d+: max \|GPU - CPU\| = ([\d.e+-]+) \(tolerance ([\d.e+-]+)\)", log)]
    greedy = re.findall(r"^  (.+?): CPU (\[[\d, ]+\])\n  \1: GPU (\[[\d, ]+\]) \(naive == cached: (\w+)\)", log, re.M)
    # The paged and int8 caches on the GPU (tests/cuda_caches.rs), when the run has them.
    paged = re.findall(r"^  (.+?), (F32|Bf16): paged == contiguous bitwise", log, re.M)
    int8 = [(m, float(d)) for m, d in re.findall(r"^  (.+?): int8 cache, max \|GPU - CPU\| = ([\d.e+-]+); tokens", log, re.M)]
    caches = {"paged_bitwise": [f"{m} {d.lower()}" for m, d in paged],
              "int8_models_tokens_equal": len(int8),
              "int8_max_abs_diff": max((d for _, d in int8), default=None)} if paged or int8 else None
    out = {
        "built_from_commit": commit.group(1),
        "date": when.group(1),
        "gpu": gpu.group(1),
        "machine": "one NVIDIA H200 (141 GB HBM3e), lent through the project's device tool",
        "command": "bash scripts/gpu-check.sh (KVLAB_BENCH_CONTEXTS=128,512,1024,2048,4096,8000)",
        "tests": {"binaries": len(results), "passed": sum(p for p, _ in results),
                  "failed": sum(f for _, f in results)},
        "peer": json.loads((folder / "peer-roofs.json").read_text()),
        "matmul": matmul,
        "logits_f32": {"max_abs_diff": max(d for d, _ in diffs), "tolerance": min(t for _, t in diffs),
                       "comparisons": len(diffs)},
        "greedy_models_equal": sum(c == g for _, c, g, _ in greedy),
        "greedy": [{"model": m, "cpu_equals_gpu": c == g, "naive_equals_cached": nc == "true",
                    "distinct_tokens": len(set(json.loads(g)))} for m, c, g, nc in greedy],
        "demo": demos,
        "caches": caches,
    }
    for dtype in ("f32", "bf16"):
        bench = json.loads((folder / f"gpu-bench-{dtype}.json").read_text())
        for row in bench["rows"]:
            plan = PLAN[(row["fused"], row["graphs"], row["matmul"], row["attention"])]
            row["id"] = f"{plan}@{row['context']}"
            row["gap"] = row["naive_step_ms"] / row["decode_ms"]
        out[dtype] = bench
    DATA.mkdir(parents=True, exist_ok=True)
    (DATA / "gpu-h200.json").write_text(json.dumps(out, indent=1) + "\n")
    (DATA / "gpu-h200.log").write_text(log)
    print(f"gpu-figures: recorded the run of kvlab {commit.group(1)} on {gpu.group(1)} ({when.group(1)}): "
          f"{out['tests']['passed']} tests passed in {len(results)} binaries, "
          f"{len(out['f32']['rows']) + len(out['bf16']['rows'])} bench rows, {len(matmul)} matmul timings")


PLAN_NAMES = [
    ("v1", "unfused, matmul v1 + attention v2"),
    ("v2", "unfused, matmul v2 + attention v2"),
    ("v3", "unfused, matmul v3 + attention v3 (split-K: the decode kernels)"),
    ("fused", "fused + attention v3"),
    ("graphs", "fused + attention v3, CUDA graphs"),
]


def markdown():
    r = json.loads((DATA / "gpu-h200.json").read_text())
    f32, bf16 = r["f32"], r["bf16"]
    contexts = sorted({row["context"] for row in f32["rows"]})
    row = lambda bench, plan, ctx: next(x for x in bench["rows"] if x["id"] == f"{plan}@{ctx}")
    lines = [
        "<!-- Written by `python3 scripts/gpu-figures.py markdown` from data/gpu-h200.json: do not edit. -->",
        "",
        f"**Decode, ms per token (tokens/s), f32 weights**, SmolLM2-135M-shaped random model, "
        f"{f32['decode_tokens']} greedy tokens after a prompt of `context` tokens, logits copied to the host:",
        "",
        "| plan | " + " | ".join(f"context {c}" for c in contexts) + " | launches/token |",
        "|---|" + "---:|" * (len(contexts) + 1),
    ]
    for plan, name in PLAN_NAMES:
        cells = [f"{row(f32, plan, c)['decode_ms']:.2f} ({row(f32, plan, c)['decode_tok_s']:.0f})" for c in contexts]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {row(f32, plan, contexts[0])['launches_per_token']:.0f} |")
    lines += [
        "",
        "**The naive step against the cached one** (naive ms / cached ms at that context, f32):",
        "",
        "| plan | " + " | ".join(f"context {c}" for c in contexts) + " |",
        "|---|" + "---:|" * len(contexts),
    ]
    for plan, name in PLAN_NAMES:
        lines.append(f"| {name} | " + " | ".join(
            f"{row(f32, plan, c)['naive_step_ms']:.1f} / {row(f32, plan, c)['decode_ms']:.2f} = {row(f32, plan, c)['gap']:.1f}x"
            for c in contexts) + " |")
    lines += [
        "",
        "**Prefill**, tokens/s (and % of the measured f32 FMA roof), f32 weights:",
        "",
        "| plan | " + " | ".join(f"{c} tokens" for c in contexts) + " |",
        "|---|" + "---:|" * len(contexts),
    ]
    for plan, name in PLAN_NAMES[:4]:  # graphs never capture a prefill: the fused row again
        lines.append(f"| {name} | " + " | ".join(
            f"{row(f32, plan, c)['prefill_tok_s']:,.0f} ({100 * row(f32, plan, c)['prefill_flop_fraction']:.1f} %)"
            for c in contexts) + " |")
    lines += [
        "",
        "**bf16 weights, decode ms per token** (half the bytes of f32):",
        "",
        "| plan | " + " | ".join(f"context {c}" for c in contexts) + " |",
        "|---|" + "---:|" * len(contexts),
    ]
    for plan, name in PLAN_NAMES:
        lines.append(f"| {name} | " + " | ".join(f"{row(bf16, plan, c)['decode_ms']:.2f}" for c in contexts) + " |")
    if any(x.get("paged_decode_ms") is not None for x in f32["rows"]):
        lines += [
            "",
            "**The other caches** (unfused plans; the fused ones write a contiguous f32 cache), decode ms per "
            "token, f32 weights: contiguous f32 / paged (`--cache paged`, blocks of 16 through a block table, "
            "attention_paged) / int8 (`--kv int8`, attention_int8):",
            "",
            "| plan | " + " | ".join(f"context {c}" for c in contexts) + " |",
            "|---|" + "---:|" * len(contexts),
        ]
        for plan, name in PLAN_NAMES[:3]:
            lines.append(f"| {name} | " + " | ".join(
                f"{row(f32, plan, c)['decode_ms']:.2f} / {row(f32, plan, c)['paged_decode_ms']:.2f} / "
                f"{row(f32, plan, c)['int8_decode_ms']:.2f}"
                for c in contexts) + " |")
    lines += [
        "",
        "**One matmul, timed alone** (`tests/cuda_kernels.rs`, the weight read at the rate shown):",
        "",
        "| version | weights | rows | d_in x d_out | µs | weights read at |",
        "|---|---|---:|---|---:|---:|",
    ]
    for m in r["matmul"]:
        lines.append(f"| {m['version']} | {m['weights']} | {m['rows']} | {m['d_in']} x {m['d_out']} | {m['us']:.1f} | {m['weight_gb_s']:,.0f} GB/s |")
    lines += [
        "",
        f"<sub>Recorded by `bash scripts/gpu-check.sh` on {r['gpu']} ({r['date']}), binaries of kvlab "
        f"{r['built_from_commit']}; the log is data/gpu-h200.log. Roofs measured in the same run: read "
        f"{f32['roof']['read_bytes_per_s'] / 1e9:,.0f} GB/s, f32 FMA {f32['roof']['fma_flop_per_s'] / 1e12:.1f} TFLOP/s "
        f"(src/cuda/roof.rs); launch latency {f32['launch_latency_us']:.2f} µs.</sub>",
        "",
    ]
    return "\n".join(lines)


README_BEGIN = "<!-- gpu-h200: written by `python3 scripts/gpu-figures.py markdown`; do not edit -->"
README_END = "<!-- gpu-h200: end -->"


def readme_summary():
    """The README's few lines on the real GPU's run, from the same record."""
    r = json.loads((DATA / "gpu-h200.json").read_text())
    f32 = r["f32"]
    row = lambda plan, ctx: next(x for x in f32["rows"] if x["id"] == f"{plan}@{ctx}")
    lines = [
        README_BEGIN,
        f"On {r['gpu']} ({r['date']}, binaries of kvlab {r['built_from_commit']}, `bash scripts/gpu-check.sh`): "
        f"all {r['tests']['passed']} GPU tests of {r['tests']['binaries']} test binaries passed; kvlab measured the GPU's "
        f"read roof at {f32['roof']['read_bytes_per_s'] / 1e9:,.0f} GB/s and its f32 FMA roof at "
        f"{f32['roof']['fma_flop_per_s'] / 1e12:.1f} TFLOP/s (PyTorch on the same GPU: "
        f"{r['peer']['read_bytes_per_s'] / 1e9:,.0f} GB/s, {r['peer']['f32_matmul_flop_per_s_no_tf32'] / 1e12:.1f} TFLOP/s).",
        "",
        "| decode, SmolLM2-135M shape, f32 | ms/token at 128 | at 8000 | naive step / cached step at 8000 |",
        "|---|---:|---:|---:|",
    ]
    for plan, name in PLAN_NAMES[1:]:
        lines.append(f"| {name} | {row(plan, 128)['decode_ms']:.2f} | {row(plan, 8000)['decode_ms']:.2f} | "
                     f"{row(plan, 8000)['gap']:,.0f}x |")
    d = r["demo"]["f32"]
    real_path = DATA / "gpu-h200-real-model.json"
    if real_path.exists():
        real = json.loads(real_path.read_text())
        lines += [
            "",
            f"The real SmolLM2-135M-Instruct there (`scripts/gpu-real-model.sh`, kvlab {real['built_from_commit']}): greedy "
            f"tokens equal to transformers' on {real['cuda_f32_equals_transformers']} of {real['cases_total']} reference "
            f"prompts with f32 weights and {real['cuda_bf16_equals_transformers']} of {real['cases_total']} with bf16 "
            f"(`--device cpu`: {real['cpu_equals_transformers']} of {real['cases_total']}).",
        ]
    lines += [
        "",
        f"`kvlab demo --device cuda` there: cached step {d['cached_tpot_ms']:.1f} ms, naive {d['naive_tpot_ms']:.1f} ms, "
        f"{d['speedup']:.1f}x over the generation, tokens identical. Book chapter `cuda.md`, "
        "\"What the H200 measured\".",
        README_END,
    ]
    return "\n".join(lines)


def with_readme_summary(readme: str) -> str:
    if README_BEGIN not in readme or README_END not in readme:
        sys.exit("gpu-figures: README.md has no gpu-h200 markers")
    head, rest = readme.split(README_BEGIN, 1)
    _, tail = rest.split(README_END, 1)
    return head + readme_summary() + tail


def record_real(path):
    """The real SmolLM2's greedy tokens on the GPU (scripts/gpu-real-model.sh), kept beside the
    run's record; its commit as `built_from_commit`, for the reason the module says."""
    r = json.loads(Path(path).read_text())
    r["built_from_commit"] = r.pop("commit")
    if "+" in r["built_from_commit"]:
        sys.exit(f"gpu-figures: the binaries were built from {r['built_from_commit']}, a tree with uncommitted changes")
    (DATA / "gpu-h200-real-model.json").write_text(json.dumps(r, indent=1) + "\n")
    print(f"gpu-figures: recorded the real model's run of kvlab {r['built_from_commit']}: "
          + ", ".join(f"{k} {r[k + '_equals_transformers']}/{r['cases_total']}" for k in ("cpu", "cuda_f32", "cuda_bf16")))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "record-real":
        record_real(sys.argv[2])
        return
    if len(sys.argv) in (2, 3) and sys.argv[1] == "markdown":
        page = ROOT / "book" / "src" / "figures" / "gpu_h200.md"
        readme = ROOT / "README.md"
        text, readme_text = markdown(), with_readme_summary(readme.read_text())
        if sys.argv[2:] == ["--check"]:
            for path, want in ((page, text), (readme, readme_text)):
                if not path.exists() or path.read_text() != want:
                    sys.exit(f"gpu-figures: {path.relative_to(ROOT)} is not what data/gpu-h200.json gives: "
                             "run `python3 scripts/gpu-figures.py markdown` and commit it")
            print(f"gpu-figures: {page.relative_to(ROOT)} and README.md match data/gpu-h200.json")
        else:
            page.write_text(text)
            readme.write_text(readme_text)
            print(f"gpu-figures: wrote {page.relative_to(ROOT)} and README.md's GPU lines")
        return
    if len(sys.argv) == 3 and sys.argv[1] == "table":
        table(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "record":
        record(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
