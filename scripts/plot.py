#!/usr/bin/env python3
"""Turns the JSON that scripts/figures.sh saved into the book's SVG figures.

Python 3 standard library only: each SVG is written by hand (axes, ticks, labels,
legend, series), so the figures can be rebuilt anywhere kvlab builds.

    python3 scripts/plot.py book/src/figures

reads book/src/figures/data/{bench,compare,generate}.json (and the matching *.cmd
files, which hold the exact command that produced each JSON) and writes

    ttft_vs_prompt.svg      prefill: time to first token vs prompt length, next to
                            one cached decode step at the same context (seed 1.1, 1.2)
    step_vs_context.svg     one decode step at a given context: naive vs cached (seed 2.2)
    cumulative_time.svg     cumulative generation time, naive vs cached (seed 2.2, 4.1)
    kv_bytes.svg            KV cache bytes reserved vs used, token by token (seed 2.3, 3.3, 4.2)

Every figure carries, under the plot, the machine it was measured on and the command
that measured it.
"""

import json
import math
import os
import sys
from xml.sax.saxutils import escape

WIDTH, HEIGHT = 720, 470
LEFT, RIGHT, TOP = 84, 64, 48
PLOT_BOTTOM = 340  # y of the x axis; captions go below
COLORS = ["#c0392b", "#2471a3", "#7d8c8d", "#27ae60"]
MARKERS = ["circle", "square", "none", "none"]


def nice_step(span, target_ticks=6):
    """A 1-2-5 step giving about `target_ticks` ticks over `span`."""
    if span <= 0:
        return 1.0
    raw = span / target_ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def ticks(lo, hi, target=6):
    step = nice_step(hi - lo, target)
    start = math.floor(lo / step) * step
    out = []
    v = start
    while v <= hi + step * 1e-9:
        out.append(round(v, 10))
        v += step
    return out, step


def fmt_tick(v, step):
    if abs(v) >= 1e9 and step >= 1e8:
        return f"{v / 1e9:g}G"
    if abs(v) >= 1e6 and step >= 1e5:
        return f"{v / 1e6:g}M"
    if abs(v) >= 1e4 and step >= 1e3:
        return f"{v / 1e3:g}k"
    if step >= 1:
        return f"{v:.0f}"
    digits = max(0, -math.floor(math.log10(step)))
    return f"{v:.{digits}f}"


def wrap(text, width=104):
    """Greedy word wrap for captions (SVG 1.1 text does not wrap by itself)."""
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return lines


def line_chart(path, title, xlabel, ylabel, series, caption, x_ticks=None, y_min=0.0, legend="top-left"):
    """series: list of dicts with label, xs, ys and optional dash / color / marker / note."""
    xs_all = [x for s in series for x in s["xs"]]
    ys_all = [y for s in series for y in s["ys"]]
    x_lo, x_hi = 0.0, max(xs_all)
    y_lo, y_hi = y_min, max(ys_all) * 1.08
    yt, ystep = ticks(y_lo, y_hi)
    y_hi = max(y_hi, yt[-1])
    if x_ticks is None:
        xt, xstep = ticks(x_lo, x_hi)
        x_hi = max(x_hi, xt[-1])
    else:
        xt, xstep = x_ticks, 1
        x_hi = max(x_hi, max(xt))
    pw, ph = WIDTH - LEFT - RIGHT, PLOT_BOTTOM - TOP

    def sx(x):
        return LEFT + (x - x_lo) / (x_hi - x_lo) * pw

    def sy(y):
        return PLOT_BOTTOM - (y - y_lo) / (y_hi - y_lo) * ph

    cap_lines = []
    for para in caption:
        cap_lines += wrap(para)
    height = PLOT_BOTTOM + 58 + 15 * len(cap_lines)

    o = []
    o.append(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="Helvetica, Arial, sans-serif" font-size="12">'
    )
    o.append(f"<title>{escape(title)}</title>")
    o.append(f"<desc>{escape(' '.join(caption))}</desc>")
    o.append(f'<rect width="{WIDTH}" height="{height}" fill="white"/>')
    o.append(
        f'<text x="{WIDTH / 2}" y="24" text-anchor="middle" font-size="15" font-weight="bold">'
        f"{escape(title)}</text>"
    )
    # Grid and ticks.
    for v in yt:
        y = sy(v)
        o.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + pw}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        o.append(
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt_tick(v, ystep)}</text>'
        )
    for v in xt:
        x = sx(v)
        o.append(f'<line x1="{x:.1f}" y1="{PLOT_BOTTOM}" x2="{x:.1f}" y2="{PLOT_BOTTOM + 5}" stroke="black"/>')
        o.append(
            f'<text x="{x:.1f}" y="{PLOT_BOTTOM + 18}" text-anchor="middle">{fmt_tick(v, xstep)}</text>'
        )
    # Axes.
    o.append(f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{PLOT_BOTTOM}" stroke="black"/>')
    o.append(f'<line x1="{LEFT}" y1="{PLOT_BOTTOM}" x2="{LEFT + pw}" y2="{PLOT_BOTTOM}" stroke="black"/>')
    o.append(
        f'<text x="{LEFT + pw / 2}" y="{PLOT_BOTTOM + 38}" text-anchor="middle" font-size="13">'
        f"{escape(xlabel)}</text>"
    )
    o.append(
        f'<text x="18" y="{TOP + ph / 2}" text-anchor="middle" font-size="13" '
        f'transform="rotate(-90 18 {TOP + ph / 2})">{escape(ylabel)}</text>'
    )
    # Series.
    for i, s in enumerate(series):
        color = s.get("color", COLORS[i % len(COLORS)])
        marker = s.get("marker", MARKERS[i % len(MARKERS)])
        dash = ' stroke-dasharray="6 4"' if s.get("dash") else ""
        pts = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in zip(s["xs"], s["ys"]))
        o.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        for x, y in zip(s["xs"], s["ys"]):
            if marker == "circle":
                o.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3.5" fill="{color}"/>')
            elif marker == "square":
                o.append(
                    f'<rect x="{sx(x) - 3.5:.1f}" y="{sy(y) - 3.5:.1f}" width="7" height="7" fill="{color}"/>'
                )
        for x, y, text in s.get("notes", []):
            o.append(
                f'<text x="{sx(x) + 6:.1f}" y="{sy(y) - 6:.1f}" fill="{color}" font-size="11">{escape(text)}</text>'
            )
    # Legend, inside the plot: top left, or bottom right where a curve fills the top.
    lw = 16 + 7 * max(len(s["label"]) for s in series)
    if legend == "bottom-right":
        lx, ly = LEFT + pw - lw - 24, PLOT_BOTTOM - 18 * len(series) - 14
    else:
        lx, ly = LEFT + 14, TOP + 10
    o.append(
        f'<rect x="{lx - 6}" y="{ly - 8}" width="{lw + 24}" height="{18 * len(series) + 8}" '
        f'fill="white" fill-opacity="0.9" stroke="#bbbbbb"/>'
    )
    for i, s in enumerate(series):
        color = s.get("color", COLORS[i % len(COLORS)])
        dash = ' stroke-dasharray="6 4"' if s.get("dash") else ""
        y = ly + 18 * i + 6
        o.append(f'<line x1="{lx}" y1="{y}" x2="{lx + 22}" y2="{y}" stroke="{color}" stroke-width="2"{dash}/>')
        o.append(f'<text x="{lx + 30}" y="{y + 4}">{escape(s["label"])}</text>')
    # Caption: machine and command.
    y = PLOT_BOTTOM + 62
    for line in cap_lines:
        o.append(f'<text x="12" y="{y}" font-size="11" fill="#444444">{escape(line)}</text>')
        y += 15
    o.append("</svg>")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(o) + "\n")
    print(f"wrote {path}")


def load(data_dir, name):
    with open(os.path.join(data_dir, f"{name}.json"), encoding="utf-8") as f:
        data = json.load(f)
    with open(os.path.join(data_dir, f"{name}.cmd"), encoding="utf-8") as f:
        cmd = f.read().strip()
    return data, cmd


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "book/src/figures"
    data_dir = os.path.join(out_dir, "data")
    bench, bench_cmd = load(data_dir, "bench")
    machine = bench["machine"]
    with open(os.path.join(data_dir, "when.txt"), encoding="utf-8") as f:
        when = f.read().strip()

    def caption(cmd):
        return [f"Measured on {machine} ({when}).", f"$ {cmd}"]

    # 1. TTFT vs prompt length, next to one cached decode step at the same context.
    pre = bench["prefill"]
    steps = {s["context"]: s for s in bench["steps"]}
    xs = [p["prompt_len"] for p in pre]
    line_chart(
        os.path.join(out_dir, "ttft_vs_prompt.svg"),
        "First token vs every later token (SmolLM2-135M, f32, CPU)",
        "prompt length / context (tokens)",
        "milliseconds",
        [
            {
                "label": "TTFT: prefill of the whole prompt (预填充)",
                "xs": xs,
                "ys": [p["ttft_ms"] for p in pre],
                "notes": [(p["prompt_len"], p["ttft_ms"], f"{p['ttft_ms']:.0f}") for p in pre[-2:]],
            },
            {
                "label": "one cached decode step at that context (解码, TPOT)",
                "xs": [c for c in xs if c in steps],
                "ys": [steps[c]["cached_ms"] for c in xs if c in steps],
                "notes": [(c, steps[c]["cached_ms"], f"{steps[c]['cached_ms']:.0f}") for c in xs[-1:] if c in steps],
            },
        ],
        caption(bench_cmd),
    )

    # 2. One decode step at a given context: naive vs cached.
    st = bench["steps"]
    cx = [s["context"] for s in st]
    line_chart(
        os.path.join(out_dir, "step_vs_context.svg"),
        "One decode step at context t: recompute everything vs KV cache",
        "context t (tokens already in the sequence)",
        "milliseconds per generated token",
        [
            {
                "label": "naive (use_cache=False): forward over all t+1 tokens",
                "xs": cx,
                "ys": [s["naive_ms"] for s in st],
                "notes": [(s["context"], s["naive_ms"], f"{s['speedup']:.0f}x") for s in st[-3:]],
            },
            {
                "label": "cached: forward over 1 token, attend over t",
                "xs": cx,
                "ys": [s["cached_ms"] for s in st],
            },
        ],
        caption(bench_cmd) + ["Labels on the naive curve: naive / cached at that context."],
    )

    # 3. Cumulative generation time, naive vs cached.
    cmp_, cmp_cmd = load(data_dir, "compare")

    def cumulative(ms):
        total, out = 0.0, []
        for v in ms:
            total += v
            out.append(total / 1e3)
        return out

    nv, cc = cmp_["naive"]["token_ms"], cmp_["cached"]["token_ms"]
    prompt_len = len(cmp_["cached"]["prompt_ids"])
    n_nv, n_cc = cumulative(nv), cumulative(cc)
    line_chart(
        os.path.join(out_dir, "cumulative_time.svg"),
        f"Total time to generate N tokens (prompt of {prompt_len} tokens, {len(cc)} generated)",
        "tokens generated",
        "seconds since the request",
        [
            {
                "label": "naive: every step recomputes the whole sequence",
                "xs": list(range(1, len(nv) + 1)),
                "ys": n_nv,
                "marker": "none",
                "notes": [(len(nv), n_nv[-1], f"{n_nv[-1]:.1f} s")],
            },
            {
                "label": "cached: prefill once, then one token per step",
                "xs": list(range(1, len(cc) + 1)),
                "ys": n_cc,
                "marker": "none",
                "notes": [(len(cc), n_cc[-1], f"{n_cc[-1]:.1f} s")],
            },
        ],
        caption(cmp_cmd)
        + [
            f"Identical tokens on both paths: {str(cmp_['identical']).lower()}. "
            f"Speedup (naive total / cached total): {cmp_['speedup']:.1f}x."
        ],
    )

    # 4. KV bytes reserved vs used, token by token.
    gen, gen_cmd = load(data_dir, "generate")
    used = gen["token_kv_bytes_used"]
    reserved = gen["kv_cache_bytes"]
    g_prompt = len(gen["prompt_ids"])
    xs = list(range(1, len(used) + 1))
    mib = 1024 * 1024
    line_chart(
        os.path.join(out_dir, "kv_bytes.svg"),
        "KV cache (KV缓存) of one request: reserved up front, filled token by token",
        "tokens generated",
        "MiB",
        [
            {
                "label": f"reserved: prompt + max_new_tokens positions ({reserved / mib:.2f} MiB)",
                # Newer kvlab records the reservation after every token too (flat for the
                # preallocated cache); older JSON only has the final figure.
                "xs": xs if "token_kv_bytes_reserved" in gen else [0, len(used)],
                "ys": [r / mib for r in gen["token_kv_bytes_reserved"]]
                if "token_kv_bytes_reserved" in gen
                else [reserved / mib, reserved / mib],
                "dash": True,
                "marker": "none",
            },
            {
                "label": "used: positions holding K and V",
                "xs": xs,
                "ys": [u / mib for u in used],
                "marker": "none",
                "notes": [(xs[0], used[0] / mib, f"after prefill: {used[0] / mib:.2f} MiB ({g_prompt} tokens)")],
            },
        ],
        [
            f"Measured on {machine} ({when}).",
            f"$ {gen_cmd}",
            f"Prompt {g_prompt} tokens, {len(used)} generated, stopped by {gen['stop_reason']}. "
            f"Each token adds 2 x 30 layers x 3 KV heads x 64 x 4 bytes = 46,080 bytes.",
        ],
        legend="bottom-right",
    )


if __name__ == "__main__":
    main()
