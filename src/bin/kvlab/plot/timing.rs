//! The timing figures: TTFT vs prompt length, one decode step vs context (`kvlab bench`),
//! the roofline (`kvlab bench`: its points and both roofs), and cumulative generation
//! time (`kvlab compare`), and §3.2's long contexts (`kvlab gqa --sweep`).

use super::chart::{self, Axis, Chart, DrawResult, Series, Style, BLUE, GREEN, GREY, RED};
use super::data::{array, field, num, Data};
use plotters::prelude::SeriesLabelPosition;
use serde_json::Value;

/// (x, y) pairs from a list of objects.
fn pairs(rows: &[Value], x: &str, y: &str) -> DrawResult<Vec<(f64, f64)>> {
    rows.iter().map(|r| Ok((num(r, x)?, num(r, y)?))).collect()
}

fn first_last(points: &[(f64, f64)]) -> DrawResult<((f64, f64), (f64, f64))> {
    match (points.first(), points.last()) {
        (Some(&a), Some(&b)) => Ok((a, b)),
        _ => Err("the report has no points".into()),
    }
}

fn min_max(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    })
}

pub fn ttft_vs_prompt(data: &Data) -> DrawResult<(String, String)> {
    let bench = data.json("bench.json")?;
    let ttft = pairs(array(&bench, "prefill")?, "prompt_len", "ttft_ms")?;
    let steps = pairs(array(&bench, "steps")?, "context", "cached_ms")?;
    let gflops: Vec<f64> = array(&bench, "prefill")?
        .iter()
        .map(|p| num(p, "gflop_s"))
        .collect::<DrawResult<_>>()?;
    let ((n0, t0), (n1, t1)) = first_last(&ttft)?;
    let (s_lo, s_hi) = min_max(steps.iter().map(|p| p.1));
    let (_, g_best) = min_max(gflops.iter().copied());
    let chart = Chart {
        title: "First token vs every later token (CPU, f32)".into(),
        x: Axis::linear("prompt length / context (tokens)"),
        y: Axis::linear("milliseconds"),
        series: vec![
            Series::new(
                "TTFT: prefill of the whole prompt",
                RED,
                Style::LinePoints,
                ttft,
            )
            .note(n1, t1, format!("  {t1:.0} ms")),
            Series::new(
                "one cached decode step at that context",
                BLUE,
                Style::LinePoints,
                steps,
            ),
        ],
        legend: SeriesLabelPosition::UpperLeft,
    };
    let svg = chart::svg(chart::SIZE, |root| chart::draw(root, &chart))?;
    let what = format!(
        "Time to first token (the prefill of the whole prompt) against prompt length, next to one cached decode step at the same context ({}, f32; each point the median of the timed runs after a warm-up). TTFT goes from {t0:.0} ms at {n0:.0} tokens to {t1:.0} ms at {n1:.0} ({:.1}x the time for {:.0}x the tokens); one cached decode step stays between {s_lo:.0} and {s_hi:.0} ms. Short prompts cost more per token than their share (every weight is read once however few tokens use it: {:.0} GFLOP/s at {n0:.0} tokens, {g_best:.0} at best).",
        model_name(&bench),
        t1 / t0,
        n1 / n0,
        gflops.first().copied().unwrap_or(0.0),
    );
    Ok((svg, what))
}

fn model_name(bench: &Value) -> String {
    let model = bench
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("the model");
    model.rsplit('/').next().unwrap_or(model).to_string()
}

pub fn step_vs_context(data: &Data) -> DrawResult<(String, String)> {
    let bench = data.json("bench.json")?;
    let rows = array(&bench, "steps")?;
    let naive = pairs(rows, "context", "naive_ms")?;
    let cached = pairs(rows, "context", "cached_ms")?;
    let ((c0, n0), (c1, n1)) = first_last(&naive)?;
    let (s_lo, s_hi) = min_max(cached.iter().map(|p| p.1));
    let speedups: Vec<f64> = rows
        .iter()
        .map(|r| num(r, "speedup"))
        .collect::<DrawResult<_>>()?;
    let mut naive_series = Series::new(
        "naive (use_cache=False): forward over all t+1 tokens",
        RED,
        Style::LinePoints,
        naive.clone(),
    );
    for (&(x, y), s) in naive.iter().zip(&speedups).rev().take(3) {
        naive_series = naive_series.note(x, y, format!("  {s:.0}x"));
    }
    let chart = Chart {
        title: "One decode step at context t: recompute everything vs KV cache".into(),
        x: Axis::linear("context t (tokens already in the sequence)"),
        y: Axis::linear("milliseconds per generated token"),
        series: vec![
            naive_series,
            Series::new(
                "cached: forward over 1 token, attend over t",
                BLUE,
                Style::LinePoints,
                cached,
            ),
        ],
        legend: SeriesLabelPosition::UpperLeft,
    };
    let svg = chart::svg(chart::SIZE, |root| chart::draw(root, &chart))?;
    let what = format!(
        "One generation step at context t on each path ({}): the naive step recomputes all t + 1 tokens, the cached one computes one token and attends over t cached positions; labels on the naive curve are naive / cached. The naive step grows from {n0:.0} ms at context {c0:.0} to {n1:.0} ms at {c1:.0}; the cached step stays between {s_lo:.0} and {s_hi:.0} ms: {:.1}x faster at {c0:.0}, {:.0}x at {c1:.0}.",
        model_name(&bench),
        speedups.first().copied().unwrap_or(0.0),
        speedups.last().copied().unwrap_or(0.0),
    );
    Ok((svg, what))
}

pub fn roofline(data: &Data) -> DrawResult<(String, String)> {
    let bench = data.json("bench.json")?;
    let bandwidth = num(&bench, "memory_gb_s")?; // GB/s = GFLOP/s per FLOP/byte
    let peak = num(&bench, "fma_peak_gflop_s")?;
    let prefill = pairs(array(&bench, "prefill")?, "intensity", "gflop_s")?;
    let decode = pairs(
        array(&bench, "steps")?,
        "cached_intensity",
        "cached_gflop_s",
    )?;
    let lens: Vec<f64> = array(&bench, "prefill")?
        .iter()
        .map(|p| num(p, "prompt_len"))
        .collect::<DrawResult<_>>()?;
    let contexts: Vec<f64> = array(&bench, "steps")?
        .iter()
        .map(|p| num(p, "context"))
        .collect::<DrawResult<_>>()?;
    let ridge = peak / bandwidth;
    let (i_lo, i_hi) = min_max(prefill.iter().chain(&decode).map(|p| p.0).chain([ridge]));
    let (x_lo, x_hi) = (i_lo / 3.0, i_hi * 3.0);
    // The roof: min(peak, I x bandwidth), sampled on a log grid.
    let roof: Vec<(f64, f64)> = (0..=200)
        .map(|k| {
            let i = x_lo * (x_hi / x_lo).powf(k as f64 / 200.0);
            (i, (i * bandwidth).min(peak))
        })
        .collect();
    let (y_lo, _) = min_max(
        prefill
            .iter()
            .chain(&decode)
            .map(|p| p.1)
            .chain([x_lo * bandwidth]),
    );
    let mut pre = Series::new("prefill of n tokens", RED, Style::Points, prefill.clone());
    for (&(x, y), n) in prefill.iter().zip(&lens) {
        pre = pre.note(x, y, format!("  n={n:.0}"));
    }
    let mut dec = Series::new(
        "cached decode step at context t",
        BLUE,
        Style::Points,
        decode.clone(),
    );
    if let (Some(&(x, y)), Some(&(_, _))) = (decode.first(), decode.last()) {
        let t: Vec<String> = contexts.iter().map(|c| format!("{c:.0}")).collect();
        dec = dec.note(x, y * 0.7, format!("  t = {}", t.join(", ")));
    }
    let chart = Chart {
        title:
            "Roofline: prefill climbs to the compute roof, decode stays under the bandwidth roof"
                .into(),
        x: Axis::log("arithmetic intensity (FLOP per byte moved)").with_range(x_lo, x_hi),
        y: Axis::log("GFLOP/s").with_range(y_lo / 2.0, peak * 2.0),
        series: vec![
            Series::new(
                &format!("roof: min({peak:.0} GFLOP/s, I x {bandwidth:.1} GB/s)"),
                GREY,
                Style::Line,
                roof,
            )
            .note(ridge, peak * 1.15, format!("ridge I = {ridge:.1}")),
            pre,
            dec,
        ],
        legend: SeriesLabelPosition::LowerRight,
    };
    let svg = chart::svg((820, 500), |root| chart::draw(root, &chart))?;
    let share = |(i, g): (f64, f64)| 100.0 * g / (i * bandwidth).min(peak);
    let (&p0, &p1) = (
        prefill.first().ok_or("no prefill points")?,
        prefill.last().ok_or("no prefill points")?,
    );
    let (&d0, &d1) = (
        decode.first().ok_or("no decode points")?,
        decode.last().ok_or("no decode points")?,
    );
    let what = format!(
        "The roofline of this machine ({}, f32, log-log): the bandwidth roof is the measured streaming read rate ({bandwidth:.1} GB/s, `lab::bench::memory_bandwidth`), the compute roof the measured f32 FMA peak of all threads ({peak:.0} GFLOP/s, FMA chains on registers as wide as the CPU has, `lab::peak::fma_peak`); they meet at I = {ridge:.1} FLOP/byte. A point's intensity I is its FLOPs over the least bytes it must move (`lab::roof`): a prefill of n tokens reads each f32 weight once and uses it n times, so I is about n / 2 ({:.1} at n = {:.0}, {:.0} at n = {:.0}); a cached decode step uses each weight once, so I stays near 0.5 whatever the context ({:.2} at t = {:.0}, {:.2} at t = {:.0}), the K and V it reads adding little. Measured: prefill reaches {:.0} GFLOP/s at n = {:.0} ({:.0}% of its roof) and {:.0} GFLOP/s at n = {:.0} ({:.0}%); decode {:.1} GFLOP/s at t = {:.0} ({:.0}% of the bandwidth roof).",
        model_name(&bench),
        p0.0, lens[0], p1.0, lens[lens.len() - 1],
        d0.0, contexts[0], d1.0, contexts[contexts.len() - 1],
        p0.1, lens[0], share(p0), p1.1, lens[lens.len() - 1], share(p1),
        d1.1, contexts[contexts.len() - 1], share(d1),
    );
    Ok((svg, what))
}

pub fn cumulative_time(data: &Data) -> DrawResult<(String, String)> {
    let compare = data.json("compare.json")?;
    let cumulative = |path: &str| -> DrawResult<Vec<(f64, f64)>> {
        let ms = super::data::nums(field(&compare, path)?, "token_ms")?;
        let mut total = 0.0;
        Ok(ms
            .iter()
            .enumerate()
            .map(|(i, t)| {
                total += t;
                ((i + 1) as f64, total / 1e3)
            })
            .collect())
    };
    let (naive, cached) = (cumulative("naive")?, cumulative("cached")?);
    let (_, (nx, ny)) = first_last(&naive)?;
    let (_, (cx, cy)) = first_last(&cached)?;
    let prompt_len = array(field(&compare, "cached")?, "prompt_ids")?.len();
    let naive_ms = super::data::nums(field(&compare, "naive")?, "token_ms")?;
    let cached_ms = super::data::nums(field(&compare, "cached")?, "token_ms")?;
    let chart = Chart {
        title: format!("Total time to generate N tokens (prompt of {prompt_len} tokens)"),
        x: Axis::linear("tokens generated"),
        y: Axis::linear("seconds since the request"),
        series: vec![
            Series::new(
                "naive: every step recomputes the whole sequence",
                RED,
                Style::Line,
                naive,
            )
            .note(nx, ny, format!(" {ny:.1} s")),
            Series::new(
                "cached: prefill once, then one token per step",
                BLUE,
                Style::Line,
                cached,
            )
            .note(cx, cy, format!(" {cy:.1} s")),
        ],
        legend: SeriesLabelPosition::UpperLeft,
    };
    let svg = chart::svg(chart::SIZE, |root| chart::draw(root, &chart))?;
    let decode_mean = cached_ms.iter().skip(1).sum::<f64>() / (cached_ms.len().max(2) - 1) as f64;
    let what = format!(
        "Cumulative generation time of one request on each path: a {prompt_len}-token prompt, {} tokens generated. Identical tokens on both paths: {}. The naive path took {ny:.1} s, the cached one {cy:.1} s ({:.1}x). The naive curve bends upward: its steps grow from {:.0} ms to {:.0} ms as the sequence grows, while the cached steps after the prefill average {decode_mean:.0} ms.",
        cached_ms.len(),
        field(&compare, "identical")?,
        ny / cy,
        naive_ms.get(1).copied().unwrap_or(0.0),
        naive_ms.last().copied().unwrap_or(0.0),
    );
    Ok((svg, what))
}

/// The three variants of `kvlab gqa --sweep`, each with its colour.
fn sweep_variants(data: &Data) -> DrawResult<Vec<(String, plotters::style::RGBColor, Vec<Value>)>> {
    let report = data.json("long_context.json")?;
    array(&report, "variants")?
        .iter()
        .zip([RED, BLUE, GREEN])
        .map(|(v, color)| {
            let name = field(v, "variant")?
                .as_str()
                .ok_or("a variant has no name")?;
            Ok((name.to_string(), color, array(v, "points")?.clone()))
        })
        .collect()
}

/// §3.2: one cached decode step against the context, MHA, GQA and MQA.
pub fn long_context_step(data: &Data) -> DrawResult<(String, String)> {
    let variants = sweep_variants(data)?;
    let mut series = Vec::new();
    let mut growth = Vec::new();
    for (name, color, points) in &variants {
        let steps = pairs(points, "context", "step_ms")?;
        let ((x0, y0), (x1, y1)) = first_last(&steps)?;
        growth.push(format!(
            "{name} {y0:.0} ms at {x0:.0} to {y1:.0} ms at {x1:.0} ({:.1}x)",
            y1 / y0
        ));
        series.push(Series::new(name, *color, Style::LinePoints, steps).note(
            x1,
            y1,
            format!(" {y1:.0} ms"),
        ));
    }
    let chart = Chart {
        title: "One cached decode step against the context".into(),
        x: Axis::linear("positions in the KV cache"),
        y: Axis::linear("ms per decode step"),
        series,
        legend: SeriesLabelPosition::UpperLeft,
    };
    let svg = chart::svg(chart::SIZE, |root| chart::draw(root, &chart))?;
    let what = format!(
        "The median time of one cached decode step on SmolLM2-135M's shape (random weights, f32 cache) with 9, 3 and 1 KV heads, over a cache of each context: the weights cost the same at every context, attention grows linearly with it. {}.",
        growth.join("; ")
    );
    Ok((svg, what))
}

/// §3.2: the time to generate N tokens, the sum of the steps, against what it would be if
/// every step cost the first one.
pub fn long_context_total(data: &Data) -> DrawResult<(String, String)> {
    let variants = sweep_variants(data)?;
    let mut series = Vec::new();
    let mut totals = Vec::new();
    for (name, color, points) in &variants {
        let seconds = |key: &str| -> DrawResult<Vec<(f64, f64)>> {
            Ok(pairs(points, "context", key)?
                .into_iter()
                .map(|(x, y)| (x, y / 1e3))
                .collect())
        };
        let (total, flat) = (seconds("generation_ms")?, seconds("flat_generation_ms")?);
        let (_, (x1, y1)) = first_last(&total)?;
        let (_, (_, f1)) = first_last(&flat)?;
        let short = total.iter().find(|p| p.0 >= 1000.0).copied();
        totals.push(match short {
            Some((xs, ys)) if ys > 0.0 => format!(
                "{name}: {y1:.0} s to {x1:.0} tokens, {:.1}x the flat {f1:.0} s; {:.0}x the {ys:.0} s of {xs:.0} tokens for {:.1}x the tokens",
                y1 / f1,
                y1 / ys,
                x1 / xs
            ),
            _ => format!(
                "{name}: {y1:.0} s to {x1:.0} tokens, {:.1}x the flat {f1:.0} s",
                y1 / f1
            ),
        });
        series.push(
            Series::new(
                &format!("{name}: the sum of the measured steps"),
                *color,
                Style::Line,
                total,
            )
            .note(x1, y1, format!(" {y1:.0} s")),
        );
        series.push(Series::new(
            &format!("{name}: if every step cost the first"),
            *color,
            Style::Dashed,
            flat,
        ));
    }
    let chart = Chart {
        title: "Time to generate N tokens with a KV cache".into(),
        x: Axis::linear("tokens generated"),
        y: Axis::linear("seconds"),
        series,
        legend: SeriesLabelPosition::UpperLeft,
    };
    let svg = chart::svg(chart::SIZE, |root| chart::draw(root, &chart))?;
    let what = format!(
        "The time a generation of N tokens takes with a KV cache, the sum of its decode steps (solid: the measured step times of the previous figure, linear between the measured contexts), against the same generation if every step cost the first one (dashed): the cache's memory grows linearly, the work quadratically. {}.",
        totals.join("; ")
    );
    Ok((svg, what))
}

/// The chapter "A model trained with a sliding window": each real model's decode step
/// against the context, on its own cache (`kvlab bench-context`, one JSON line each).
pub fn tpot_context(data: &Data) -> DrawResult<(String, String)> {
    let runs = data.jsonl("tpot_context.jsonl")?;
    let mut series = Vec::new();
    let mut lines = Vec::new();
    for (r, color) in runs.iter().zip([BLUE, RED, GREEN]) {
        let model = field(r, "model")?.as_str().ok_or("a run has no model")?;
        let name = model.rsplit('/').next().unwrap_or(model).to_string();
        let points = array(r, "points")?;
        let steps = pairs(points, "context", "step_ms")?;
        let ((x0, y0), (x1, y1)) = first_last(&steps)?;
        let last = points.last().ok_or("a run has no points")?;
        let mib = |key: &str| -> DrawResult<f64> { Ok(num(last, key)? / f64::from(1u32 << 20)) };
        lines.push(format!(
            "{name} ({} of {} layers local): {y0:.1} ms at {x0:.0} to {y1:.1} ms at {x1:.0} ({:.2}x), its step reading {:.1} MiB of cache at {x1:.0} of the {:.1} MiB every layer would hold",
            num(r, "local_layers")?,
            num(r, "layers")?,
            y1 / y0,
            mib("kv_bytes_read")?,
            mib("kv_bytes_full")?
        ));
        series.push(Series::new(&name, color, Style::LinePoints, steps).note(
            x1,
            y1,
            format!(" {y1:.0} ms"),
        ));
    }
    let chart = Chart {
        title: "Decode step against the context, each model on its own cache".into(),
        x: Axis::linear("positions in the KV cache"),
        y: Axis::linear("ms per decode step (TPOT)"),
        series,
        legend: SeriesLabelPosition::UpperLeft,
    };
    let svg = chart::svg(chart::SIZE, |root| chart::draw(root, &chart))?;
    let machine = runs
        .first()
        .and_then(|r| r.get("machine"))
        .and_then(Value::as_str)
        .unwrap_or("?");
    let what = format!(
        "The median cached decode step of each real model (its own weights, f32 rows; the cache filled with synthetic K and V) at each context, on {machine}. {}.",
        lines.join("; ")
    );
    Ok((svg, what))
}
