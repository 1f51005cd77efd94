#!/usr/bin/env python3
"""The GPU check's figures, from the JSON that `kvlab bench --device cuda --json` wrote.

    python3 scripts/gpu-figures.py table FILE.json     the bench as a table (gpu-check.sh prints it)

No third-party module: it runs on the GPU machine's python3 as on this one.
"""
import json
import sys


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


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "table":
        table(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
