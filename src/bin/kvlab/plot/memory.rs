//! The memory figures: the KV cache of one request (`kvlab generate`), the layouts side by
//! side (`kvlab trace`), requests per budget (`kvlab capacity`), prefix-hit TTFT
//! (`kvlab prefix`) and multi-turn TTFT with and without reuse (`kvlab chat`).

use super::chart::{self, Axis, Chart, DrawResult, Series, Style, BLUE, GREEN, GREY, PURPLE, RED};
use super::data::{array, field, num, nums, thousands, Data};
use plotters::prelude::*;
use serde_json::Value;

const MIB: f64 = 1024.0 * 1024.0;

pub fn kv_bytes(data: &Data) -> DrawResult<(String, String)> {
    let g = data.json("generate.json")?;
    let used = nums(&g, "token_kv_bytes_used")?;
    let reserved = nums(&g, "token_kv_bytes_reserved")?;
    let prompt = array(&g, "prompt_ids")?.len();
    let series = |v: &[f64]| -> Vec<(f64, f64)> {
        v.iter()
            .enumerate()
            .map(|(i, b)| ((i + 1) as f64, b / MIB))
            .collect()
    };
    let (first, last) = (
        used.first().copied().ok_or("no tokens")?,
        used.last().copied().ok_or("no tokens")?,
    );
    let per_token = if used.len() > 1 {
        (last - first) / (used.len() - 1) as f64
    } else {
        first / prompt.max(1) as f64
    };
    let top = reserved.iter().copied().fold(0.0, f64::max);
    let chart = Chart {
        title: "KV cache of one request: reserved up front, filled token by token".into(),
        x: Axis::linear("tokens generated (1 = the prefill)"),
        y: Axis::linear("MiB").with_range(0.0, top / MIB * 1.15),
        series: vec![
            Series::new(
                "reserved: prompt + max_new_tokens positions",
                RED,
                Style::Dashed,
                series(&reserved),
            ),
            Series::new(
                "used: positions holding K and V",
                BLUE,
                Style::Line,
                series(&used),
            ),
        ],
        legend: SeriesLabelPosition::LowerRight,
    };
    let svg = chart::svg(chart::SIZE, |root| chart::draw(root, &chart))?;
    let what = format!(
        "The preallocated KV cache of one request, after each token: a {prompt}-token chat prompt, {} new tokens (stopped by {}). Reserved: {} bytes before the first token; used after the prefill: {} bytes ({prompt} positions), at the end {} bytes; each token adds {} bytes (2 x layers x KV heads x head_dim x 4 bytes).",
        used.len(),
        field(&g, "stop_reason")?.as_str().unwrap_or("?").replace('_', " "),
        thousands(top as usize),
        thousands(first as usize),
        thousands(last as usize),
        thousands(per_token.round() as usize),
    );
    Ok((svg, what))
}

/// The trace's layouts in order of appearance.
fn layouts(rows: &[Value]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for r in rows {
        if let Some(l) = r.get("layout").and_then(Value::as_str) {
            if !names.iter().any(|n| n == l) {
                names.push(l.to_string());
            }
        }
    }
    names
}

/// Colours of the layouts' lines in the shared step-time panel (red and blue are taken:
/// reserved and used).
const LAYOUT_COLORS: [RGBColor; 5] = [GREEN, PURPLE, GREY, BLUE, RED];

/// The trace's charts: one memory chart per layout (MiB reserved and used after each
/// step, all on one y range), and one decode-step-time chart with a line per layout.
fn trace_charts(rows: &[Value]) -> DrawResult<(Vec<Chart>, Chart)> {
    let names = layouts(rows);
    let mem_max = rows
        .iter()
        .filter_map(|r| r.get("bytes_reserved")?.as_f64())
        .fold(1.0, f64::max)
        / MIB;
    let decode = |r: &&Value| r.get("step").and_then(Value::as_u64).unwrap_or(0) >= 2;
    let ms_max = rows
        .iter()
        .filter(decode)
        .filter_map(|r| r.get("step_ms")?.as_f64())
        .fold(1e-3, f64::max);
    let mut memory = Vec::new();
    let mut times = Vec::new();
    for (name, color) in names.iter().zip(LAYOUT_COLORS.iter().cycle()) {
        let mine: Vec<&Value> = rows
            .iter()
            .filter(|r| r.get("layout").and_then(Value::as_str) == Some(name))
            .collect();
        let pts = |key: &str, only_decode: bool| -> DrawResult<Vec<(f64, f64)>> {
            mine.iter()
                .filter(|r| !only_decode || decode(r))
                .map(|r| Ok((num(r, "step")?, num(r, key)?)))
                .collect()
        };
        let mib = |v: Vec<(f64, f64)>| v.into_iter().map(|(x, y)| (x, y / MIB)).collect();
        memory.push(Chart {
            title: format!("{name}: memory"),
            x: Axis::linear("step (0 = before prefill, 1 = prefill)"),
            y: Axis::linear("KV cache MiB").with_range(0.0, mem_max * 1.3),
            series: vec![
                Series::new(
                    "reserved",
                    RED,
                    Style::Step,
                    mib(pts("bytes_reserved", false)?),
                ),
                Series::new(
                    "used (live tokens)",
                    BLUE,
                    Style::Step,
                    mib(pts("bytes_used", false)?),
                ),
            ],
            legend: SeriesLabelPosition::UpperLeft,
        });
        times.push(Series::new(
            name,
            *color,
            Style::Line,
            pts("step_ms", true)?,
        ));
    }
    // One panel for every layout's step times, so that they are compared on one axis and
    // take a strip, not a row; the x axis runs a quarter past the last step, and the
    // legend sits in that room, clear of the lines.
    let last_step = rows
        .iter()
        .filter_map(|r| r.get("step")?.as_f64())
        .fold(1.0, f64::max);
    let steps = Chart {
        title: "decode step time, every layout (the prefill, step 1, left out)".into(),
        x: Axis::linear("step").with_range(0.0, last_step * 1.25),
        y: Axis::linear("ms").with_range(0.0, ms_max * 1.15),
        series: times,
        legend: SeriesLabelPosition::MiddleRight,
    };
    Ok((memory, steps))
}

/// One memory panel per layout (MiB, sharing their y range) side by side, and under them
/// one shorter panel of the decode step times, a line per layout. `kvlab trace` draws its
/// own trace.svg with this too.
pub fn trace_svg(rows: &[Value], title: &str) -> DrawResult<String> {
    let (memory, steps) = trace_charts(rows)?;
    let cols = memory.len().max(1);
    chart::svg((360 * cols as u32, 34 + 290 + 210), |root| {
        let (head, body) = root.split_vertically(34);
        head.draw(&Text::new(title, (12, 8), ("sans-serif", 17)))?;
        let (top, bottom) = body.split_vertically(290);
        let panels = top.split_evenly((1, cols));
        for (panel, chart) in panels.iter().zip(&memory) {
            chart::draw(panel, chart)?;
        }
        chart::draw(&bottom, &steps)
    })
}

pub fn cache_layouts(data: &Data) -> DrawResult<(String, String)> {
    let trace = data.json("trace.json")?;
    let rows = trace.as_array().ok_or("trace.json is not a list of rows")?;
    let names = layouts(rows);
    let steps = rows
        .iter()
        .filter_map(|r| r.get("step")?.as_u64())
        .max()
        .unwrap_or(0);
    let prompt = rows
        .iter()
        .find(|r| r.get("step").and_then(Value::as_u64) == Some(1))
        .map_or(0.0, |r| num(r, "positions").unwrap_or(0.0));
    let svg = trace_svg(
        rows,
        &format!("KV cache by layout: prompt {prompt:.0} tokens, {steps} generated"),
    )?;
    let mut facts = Vec::new();
    for name in &names {
        let mine: Vec<&Value> = rows
            .iter()
            .filter(|r| r.get("layout").and_then(Value::as_str) == Some(name))
            .collect();
        let last = mine.last().ok_or("empty layout")?;
        let decode: Vec<f64> = mine
            .iter()
            .filter(|r| r.get("step").and_then(Value::as_u64).unwrap_or(0) >= 2)
            .filter_map(|r| r.get("step_ms")?.as_f64())
            .collect();
        let median = {
            let mut d = decode.clone();
            d.sort_by(f64::total_cmp);
            d.get(d.len() / 2).copied().unwrap_or(0.0)
        };
        facts.push(format!(
            "{name} ends holding {:.2} MiB for {:.2} MiB of live K and V, copied {:.2} MiB to grow, median decode step {median:.0} ms",
            num(last, "bytes_reserved")? / MIB,
            num(last, "bytes_used")? / MIB,
            num(last, "bytes_copied")? / MIB,
        ));
    }
    let what = format!(
        "The same request (a {prompt:.0}-token chat prompt, {steps} new tokens) run once per KV cache layout; top: bytes reserved and bytes holding live positions after each step, one panel per layout; bottom: each decode step's time, one line per layout (the prefill, step 1, is left out). {}. The step times jitter with whatever else the machine runs.",
        facts.join("; ")
    );
    Ok((svg, what))
}

/// Requests admitted per budget on log-log axes (paged and preallocated), and under them
/// the ratio paged / preallocated on a linear axis from 0, where a 1.5x gap shows as
/// half again the height, with 1x (no gain) dashed. Both panels share the x range.
fn capacity_charts(runs: &[Value]) -> DrawResult<(Chart, Chart)> {
    let mut pre = Vec::new();
    let mut paged = Vec::new();
    let mut ratio = Vec::new();
    for r in runs {
        let budget = num(r, "budget_bytes")? / MIB;
        pre.push((budget, num(field(r, "preallocated")?, "requests")?));
        paged.push((budget, num(field(r, "paged")?, "requests")?));
        // The report's own ratio (`kvlab capacity` computes it), as the caption reads it.
        ratio.push((budget, num(r, "gain")?));
    }
    let budgets = || pre.iter().map(|p: &(f64, f64)| p.0).filter(|b| *b > 0.0);
    let (b_lo, b_hi) = (
        budgets().fold(f64::INFINITY, f64::min),
        budgets().fold(0.0, f64::max),
    );
    let (b_lo, b_hi) = if b_lo.is_finite() && b_hi > 0.0 {
        (b_lo / 1.5, b_hi * 1.5)
    } else {
        (1.0, 10.0)
    };
    let counts = Chart {
        title: "Requests that fit in a KV cache budget".into(),
        x: Axis::log("KV cache budget (MiB)").with_range(b_lo, b_hi),
        y: Axis::log("concurrent requests admitted"),
        series: vec![
            Series::new(
                "paged: blocks taken as the sequence grows",
                BLUE,
                Style::LinePoints,
                paged,
            ),
            Series::new(
                "preallocated: prompt + max_new_tokens reserved",
                RED,
                Style::LinePoints,
                pre,
            ),
        ],
        legend: SeriesLabelPosition::UpperLeft,
    };
    let r_max = ratio.iter().map(|p| p.1).fold(1.0, f64::max);
    let mut gain = Series::new(
        "paged / preallocated",
        PURPLE,
        Style::LinePoints,
        ratio.clone(),
    );
    let r_top = r_max * 1.3;
    // A few round ticks, no light gridlines: a short panel would be all grey with them.
    let r_step = [0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
        .into_iter()
        .find(|s| r_top / s <= 6.0)
        .unwrap_or(r_top / 4.0);
    // Each ratio written just above its point (a note's corner is its top left).
    for &(b, r) in &ratio {
        gain = gain.note(b, r + 0.16 * r_top, format!("{r:.2}x"));
    }
    let ratio_chart = Chart {
        title: "Paged over preallocated: requests admitted".into(),
        x: Axis::log("KV cache budget (MiB)").with_range(b_lo, b_hi),
        y: Axis::linear("paged / preallocated (x)")
            .with_range(0.0, r_top)
            .with_ticks(
                (0..=(r_top / r_step) as usize)
                    .map(|i| i as f64 * r_step)
                    .collect(),
            ),
        series: vec![
            Series::new(
                "1x: as many requests",
                GREY,
                Style::Dashed,
                vec![(b_lo, 1.0), (b_hi, 1.0)],
            ),
            gain,
        ],
        legend: SeriesLabelPosition::LowerRight,
    };
    Ok((counts, ratio_chart))
}

pub fn capacity(data: &Data) -> DrawResult<(String, String)> {
    let runs = data.jsonl("capacity.jsonl")?;
    let last = runs.last().ok_or("capacity.jsonl is empty")?;
    let (counts, ratio) = capacity_charts(&runs)?;
    // The ratio's panel is shorter, under the counts, on the same budgets.
    let svg = chart::svg((chart::SIZE.0, chart::SIZE.1 + 260), |root| {
        let (top, bottom) = root.split_vertically(chart::SIZE.1);
        chart::draw(&top, &counts)?;
        chart::draw(&bottom, &ratio)
    })?;
    let what = format!(
        "How many requests of one seeded mix (prompts log-uniform from 16 to the longest, outputs uniform up to max_new_tokens = {:.0}; mean prompt {:.0}, mean output {:.0} tokens; {:.0} positions per block) fit in each KV budget, admitted in arrival order, SmolLM2-135M's cache shape (f32, {} bytes per token). At {:.0} MiB: {:.0} preallocated vs {:.0} paged ({:.1}x); the preallocated reservations are {:.0}% never written, the paged ones {:.1}%. Bottom: paged / preallocated at each budget, smallest first: {} (a small budget holds few requests, so one more or less moves the ratio).",
        num(last, "max_new_tokens")?,
        num(last, "mean_prompt_len")?,
        num(last, "mean_output_len")?,
        num(last, "block_size")?,
        thousands(num(last, "bytes_per_token")? as usize),
        num(last, "budget_bytes")? / MIB,
        num(field(last, "preallocated")?, "requests")?,
        num(field(last, "paged")?, "requests")?,
        num(last, "gain")?,
        100.0 * num(field(last, "preallocated")?, "waste")?,
        100.0 * num(field(last, "paged")?, "waste")?,
        runs.iter()
            .map(|r| Ok(format!("{:.2}x", num(r, "gain")?)))
            .collect::<DrawResult<Vec<_>>>()?
            .join(", "),
    );
    Ok((svg, what))
}

/// §3.1: each model's KV cache against context (solid), and its weights (dashed): one
/// `kvlab kv-size --params ... --json` line per model.
pub fn kv_vs_weights(data: &Data) -> DrawResult<(String, String)> {
    const GB: f64 = 1e9;
    let runs = data.jsonl("kv_vs_weights.jsonl")?;
    let colors = [BLUE, RED, GREEN, PURPLE];
    let contexts: Vec<f64> = (7..=17).map(|e| f64::from(1u32 << e)).collect(); // 128 .. 128K
    let mut series = Vec::new();
    let mut lines = Vec::new();
    for (r, color) in runs.iter().zip(colors.iter().cycle()) {
        let name = field(r, "name")?
            .as_str()
            .ok_or("a kv_vs_weights line has no name")?;
        let per_token = num(r, "bytes_per_token")?;
        let weights = field(r, "weights")?;
        let weight_gb = num(weights, "weight_bytes")? / GB;
        // A model with local layers (Gemma 3): each of them stops growing at its window.
        let groups = r.get("layer_groups").filter(|g| !g.is_null());
        let kv_bytes = |t: f64| -> DrawResult<f64> {
            Ok(match groups {
                None => t * per_token,
                Some(g) => {
                    let (global, local) = (num(g, "global_layers")?, num(g, "local_layers")?);
                    let window = num(g, "window")?;
                    per_token / (global + local) * (global * t + local * t.min(window))
                }
            })
        };
        let crossover = match groups {
            None => num(weights, "crossover_tokens")?,
            // The first context whose cache outweighs the weights: inside the window every
            // layer grows, past it only the global ones.
            Some(g) => {
                let (global, local) = (num(g, "global_layers")?, num(g, "local_layers")?);
                let window = num(g, "window")?;
                let per_layer = per_token / (global + local);
                let positions = num(weights, "weight_bytes")? / per_layer; // layer-positions
                if positions < (global + local) * window {
                    (positions / (global + local)).floor() + 1.0
                } else {
                    ((positions - local * window) / global.max(1.0)).floor() + 1.0
                }
            }
        };
        let label = match groups {
            None => format!("{} bytes per token", thousands(per_token as usize)),
            Some(g) => format!(
                "{} of {} layers local, window {}",
                num(g, "local_layers")?,
                num(g, "local_layers")? + num(g, "global_layers")?,
                num(g, "window")?
            ),
        };
        series.push(Series::new(
            &format!("{name}: KV cache ({label})"),
            *color,
            Style::Line,
            contexts
                .iter()
                .map(|&t| Ok((t, kv_bytes(t)? / GB)))
                .collect::<DrawResult<Vec<_>>>()?,
        ));
        series.push(Series::new(
            &format!("{name}: weights ({weight_gb:.2} GB)"),
            *color,
            Style::Dashed,
            vec![
                (contexts[0], weight_gb),
                (contexts[contexts.len() - 1], weight_gb),
            ],
        ));
        lines.push(format!(
            "{name}: {label}, {weight_gb:.2} GB of weights, so the cache is larger from {} tokens on",
            thousands(crossover as usize)
        ));
    }
    let chart = Chart {
        title: "One sequence's KV cache against the model's weights (bf16)".into(),
        x: Axis::log("context (tokens)"),
        y: Axis::log("GB"),
        series,
        legend: SeriesLabelPosition::LowerRight,
    };
    let svg = chart::svg(chart::SIZE, |root| chart::draw(root, &chart))?;
    let what = format!(
        "The bytes of one sequence's KV cache (solid, `2 x layers x kv_heads x head_dim x 2 bytes` per token; a local layer of a hybrid model holds at most its window, as a cache that frees the positions it can no longer see would) against the weights (dashed, parameters x 2 bytes), bf16 both, from 128 to 131,072 tokens. {}. Several sequences multiply the cache, not the weights: at batch 8 each crossover is 8 times shorter.",
        lines.join("; ")
    );
    Ok((svg, what))
}

/// Side-by-side bars: one group per x, one bar per series.
fn bars(
    title: &str,
    x_label: &str,
    y_label: &str,
    groups: &[String],
    series: &[(&str, RGBColor, Vec<f64>)],
) -> DrawResult<String> {
    let y_max = series
        .iter()
        .flat_map(|s| s.2.iter().copied())
        .fold(1e-9, f64::max)
        * 1.2;
    chart::svg(chart::SIZE, |root| {
        let mut ctx = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 17))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..groups.len() as f64, 0.0..y_max)?;
        ctx.configure_mesh()
            .disable_x_mesh()
            .x_labels(groups.len() + 1)
            .x_label_formatter(&|v| {
                let i = (v - 0.5).round();
                if (v - 0.5 - i).abs() < 1e-6 && i >= 0.0 {
                    groups.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|v| chart::tick(*v))
            .x_desc(x_label)
            .y_desc(y_label)
            .label_style(("sans-serif", 12))
            .axis_desc_style(("sans-serif", 14))
            .draw()?;
        let width = 0.8 / series.len() as f64;
        for (k, (name, color, values)) in series.iter().enumerate() {
            let color = *color;
            ctx.draw_series(values.iter().enumerate().map(|(g, &v)| {
                let x0 = g as f64 + 0.1 + k as f64 * width;
                Rectangle::new([(x0, 0.0), (x0 + width * 0.92, v)], color.filled())
            }))?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()));
            ctx.draw_series(values.iter().enumerate().map(|(g, &v)| {
                let x0 = g as f64 + 0.1 + k as f64 * width;
                Text::new(
                    format!("{v:.0}"),
                    (x0, v + y_max * 0.03),
                    ("sans-serif", 11),
                )
            }))?;
        }
        ctx.configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(RGBColor(190, 190, 190))
            .label_font(("sans-serif", 12))
            .draw()?;
        Ok(())
    })
}

pub fn prefix_ttft(data: &Data) -> DrawResult<(String, String)> {
    let p = data.json("prefix.json")?;
    let ttfts = |run: &str| -> DrawResult<Vec<f64>> {
        array(field(&p, run)?, "requests")?
            .iter()
            .map(|r| num(r, "ttft_ms"))
            .collect()
    };
    let (without, with) = (ttfts("without")?, ttfts("with")?);
    let reused: Vec<f64> = array(field(&p, "with")?, "requests")?
        .iter()
        .map(|r| num(r, "reused"))
        .collect::<DrawResult<_>>()?;
    let groups: Vec<String> = (1..=without.len())
        .map(|i| format!("request {i}"))
        .collect();
    let svg = bars(
        "Time to first token of requests sharing a system prompt",
        "requests, in arrival order",
        "TTFT (ms)",
        &groups,
        &[
            ("no prefix caching", RED, without.clone()),
            ("prefix caching", BLUE, with.clone()),
        ],
    )?;
    let what = format!(
        "{:.0} requests, each a shared {:.0}-token system prompt followed by {:.0} tokens of its own, {:.0} new tokens each, paged cache of {:.0}-token blocks. Without prefix caching every request prefills the whole prompt (TTFT {}); with it the first request computes the shared blocks and each later one finds {:.0} positions cached and prefills only the rest (TTFT {}): {:.1}x faster for the later requests, and the pool holds {:.1}x fewer KV bytes ({} vs {}). Identical tokens: {}.",
        num(&p, "n_requests")?,
        num(&p, "shared_len")?,
        num(&p, "suffix_len")?,
        num(&p, "max_new_tokens")?,
        num(&p, "block_size")?,
        list_ms(&without),
        reused.get(1).copied().unwrap_or(0.0),
        list_ms(&with),
        num(&p, "ttft_speedup")?,
        num(&p, "kv_ratio")?,
        thousands(num(field(&p, "without")?, "kv_bytes")? as usize),
        thousands(num(field(&p, "with")?, "kv_bytes")? as usize),
        field(&p, "identical_tokens")?,
    );
    Ok((svg, what))
}

fn list_ms(v: &[f64]) -> String {
    v.iter()
        .map(|t| format!("{t:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
        + " ms"
}

pub fn multi_turn(data: &Data) -> DrawResult<(String, String)> {
    let reuse = data.jsonl("chat_reuse.jsonl")?;
    let fresh = data.jsonl("chat_no_reuse.jsonl")?;
    let pts = |turns: &[Value]| -> DrawResult<Vec<(f64, f64)>> {
        turns
            .iter()
            .map(|t| Ok((num(t, "turn")?, num(t, "ttft_ms")?)))
            .collect()
    };
    let (with, without) = (pts(&reuse)?, pts(&fresh)?);
    let last = reuse.last().ok_or("chat_reuse.jsonl is empty")?;
    let last_fresh = fresh.last().ok_or("chat_no_reuse.jsonl is empty")?;
    let mut with_series = Series::new(
        "KV cache kept between turns",
        BLUE,
        Style::LinePoints,
        with.clone(),
    );
    for (t, &(x, y)) in reuse.iter().zip(&with) {
        with_series = with_series.note(x, y, format!(" {:.0} new", num(t, "computed")?));
    }
    let mut without_series = Series::new(
        "whole conversation recomputed every turn",
        RED,
        Style::LinePoints,
        without.clone(),
    );
    for (t, &(x, y)) in fresh.iter().zip(&without) {
        without_series = without_series.note(x, y, format!(" {:.0}", num(t, "computed")?));
    }
    let chart = Chart {
        title: "Multi-turn chat: time to first token of each turn".into(),
        x: Axis::linear("turn").with_range(0.5, with.len().max(without.len()) as f64 + 0.7),
        y: Axis::linear("TTFT (ms)"),
        series: vec![without_series, with_series],
        legend: SeriesLabelPosition::UpperLeft,
    };
    let svg = chart::svg(chart::SIZE, |root| chart::draw(root, &chart))?;
    let what = format!(
        "A {}-turn conversation (the user lines of `prompts/multi_turn.txt`, greedy replies) with the KV cache kept between turns, and with the whole conversation recomputed every turn; labels: tokens prefilled that turn. By turn {:.0} the prompt is {:.0} tokens: recomputing them all takes {:.0} ms to the first token, reusing the cache {:.0} ms ({:.0} positions reused, {:.0} computed: {:.1}x faster). Replies are the same on both runs: {}.",
        reuse.len(),
        num(last, "turn")?,
        num(last, "prompt_tokens")?,
        num(last_fresh, "ttft_ms")?,
        num(last, "ttft_ms")?,
        num(last, "reused")?,
        num(last, "computed")?,
        num(last_fresh, "ttft_ms")? / num(last, "ttft_ms")?,
        reuse.iter().zip(&fresh).all(|(a, b)| a.get("reply") == b.get("reply")),
    );
    Ok((svg, what))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn trace_rows() -> Vec<Value> {
        let mut rows = Vec::new();
        for layout in ["preallocated", "growable", "paged"] {
            for step in 0..6 {
                rows.push(json!({
                    "layout": layout, "step": step, "positions": 10 + step,
                    "bytes_reserved": 4.0 * MIB, "bytes_used": step as f64 * MIB / 2.0,
                    "bytes_copied": 0, "step_ms": if step == 1 { 100.0 } else { 30.0 },
                }));
            }
        }
        rows
    }

    #[test]
    fn the_trace_has_one_step_time_panel_for_every_layout() {
        let rows = trace_rows();
        let (memory, steps) = trace_charts(&rows).unwrap();
        assert_eq!(memory.len(), 3);
        let names: Vec<&str> = steps.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["preallocated", "growable", "paged"]);
        // Decode steps only (2..=5): the prefill's 100 ms is left out.
        for s in &steps.series {
            assert_eq!(s.points.first(), Some(&(2.0, 30.0)));
            assert_eq!(s.points.len(), 4);
        }
        let svg = trace_svg(&rows, "trace").unwrap();
        assert_eq!(svg.matches("decode step time").count(), 1);
        assert_eq!(svg.matches(": memory").count(), 3);
    }

    #[test]
    fn the_capacity_figure_has_a_ratio_panel() {
        let run = |mib: f64, pre: f64, paged: f64| {
            json!({
                "budget_bytes": mib * MIB,
                "preallocated": {"requests": pre},
                "paged": {"requests": paged},
                "gain": paged / pre,
            })
        };
        let runs = [
            run(64.0, 2.0, 2.0),
            run(128.0, 4.0, 5.0),
            run(4096.0, 117.0, 176.0),
        ];
        let (counts, ratio) = capacity_charts(&runs).unwrap();
        let gain = ratio
            .series
            .iter()
            .find(|s| s.name == "paged / preallocated")
            .expect("a ratio series");
        let ys: Vec<f64> = gain.points.iter().map(|p| p.1).collect();
        assert_eq!(ys[..2], [1.0, 1.25]);
        assert!((ys[2] - 176.0 / 117.0).abs() < 1e-12);
        // A linear axis from 0 holding every ratio; the same budgets as the counts above.
        assert!(ratio.y.scale == chart::Scale::Linear);
        let (lo, hi) = ratio.y.range.unwrap();
        assert!(lo == 0.0 && ys.iter().all(|&y| y < hi));
        assert_eq!(ratio.x.range, counts.x.range);
        assert_eq!(counts.series.len(), 2);
    }
}
