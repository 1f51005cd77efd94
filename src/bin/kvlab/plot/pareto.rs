//! Every KV policy on one text: accuracy against KV bytes (book: eviction.md). The same
//! rows make the figure (`kvlab plot eval_pareto`) and the table (`kvlab eval-table`).

use super::chart::{self, Axis, Chart, Series, Style, BLUE, GREEN, GREY, PURPLE, RED};
use super::data::{field, num, Data};
use chart::DrawResult;
use plotters::prelude::SeriesLabelPosition;
use serde_json::Value;

/// One policy's line of `eval_pareto.jsonl` (a `kvlab eval --json` report).
pub struct ParetoRow {
    /// `window-w256-s4`
    pub label: String,
    /// `window`
    pub kv: String,
    pub n_tokens: usize,
    pub kv_cache_bytes: usize,
    pub kv_bytes_ratio: f64,
    pub perplexity: f64,
    pub full_perplexity: f64,
    pub top1_agreement: f64,
    pub mean_kl: f64,
}

fn text(v: &Value, key: &str) -> DrawResult<String> {
    Ok(field(v, key)?
        .as_str()
        .ok_or_else(|| format!("field {key:?} is not text"))?
        .to_string())
}

/// The rows of `kvlab eval --json` reports, which must all score the same tokens.
pub fn rows(reports: &[Value]) -> DrawResult<Vec<ParetoRow>> {
    let rows = reports
        .iter()
        .map(|r| {
            Ok(ParetoRow {
                label: text(r, "label")?,
                kv: text(r, "kv")?,
                n_tokens: num(r, "n_tokens")? as usize,
                kv_cache_bytes: num(r, "kv_cache_bytes")? as usize,
                kv_bytes_ratio: num(r, "kv_bytes_ratio")?,
                perplexity: num(r, "perplexity")?,
                full_perplexity: num(r, "full_perplexity")?,
                top1_agreement: num(r, "top1_agreement")?,
                mean_kl: num(r, "mean_kl")?,
            })
        })
        .collect::<DrawResult<Vec<_>>>()?;
    let Some(first) = rows.first() else {
        return Err("no reports: run bash scripts/figures.sh (ONLY=eval_pareto)".into());
    };
    if let Some(other) = rows.iter().find(|r| r.n_tokens != first.n_tokens) {
        return Err(format!(
            "the reports score different texts ({} tokens for {}, {} for {}): measure every policy on one text",
            first.n_tokens, first.label, other.n_tokens, other.label
        )
        .into());
    }
    Ok(rows)
}

/// A policy's family (the legend) and its colour: full, int8, int4, window, H2O.
fn family(kv: &str) -> (&'static str, plotters::style::RGBColor) {
    match kv {
        "full" => ("full cache (f32)", GREY),
        "window" => ("sliding window", RED),
        "h2o" => ("H2O", GREEN),
        "int8" => ("int8", BLUE),
        _ => ("int4", PURPLE),
    }
}

const MIB: f64 = 1024.0 * 1024.0;

pub fn eval_pareto(data: &Data) -> DrawResult<(String, String)> {
    let rows = rows(&data.jsonl("eval_pareto.jsonl")?)?;
    // One series per point, labelled by its note; the legend names each family once.
    let points = |key: fn(&ParetoRow) -> f64| -> Vec<Series> {
        let mut named = Vec::new();
        rows.iter()
            .map(|r| {
                let (x, y) = (r.kv_cache_bytes as f64 / MIB, key(r));
                let (name, color) = family(&r.kv);
                let legend = if named.contains(&name) { "" } else { name };
                named.push(name);
                Series::new(legend, color, Style::Points, vec![(x, y)]).note(x, y, r.label.clone())
            })
            .collect()
    };
    let full_ppl = rows[0].full_perplexity;
    let max_ppl = rows.iter().map(|r| r.perplexity).fold(full_ppl, f64::max);
    let mib = rows.iter().map(|r| r.kv_cache_bytes as f64 / MIB);
    let (x_min, x_max) = mib.fold((f64::INFINITY, 0.0f64), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    });
    // Log bytes: the policies crowd at a quarter of the full cache, the full cache is far off.
    let bytes_axis = || Axis::log("KV cache (MiB, log scale)").with_range(x_min / 1.4, x_max * 1.6);
    let mut ppl_series = points(|r| r.perplexity);
    ppl_series.push(Series::new(
        "",
        GREY,
        Style::Dashed,
        vec![(x_min / 1.4, full_ppl), (x_max * 1.6, full_ppl)],
    ));
    let perplexity = Chart {
        title: "perplexity (lower is better; dashed: full cache)".into(),
        x: bytes_axis(),
        // Log only when a policy is off by more than 10x (a window without sinks can be).
        y: if max_ppl > 10.0 * full_ppl {
            Axis::log("perplexity").with_range(full_ppl / 1.2, max_ppl * 1.5)
        } else {
            Axis::linear("perplexity").with_range(full_ppl * 0.95, max_ppl * 1.05)
        },
        series: ppl_series,
        legend: SeriesLabelPosition::UpperRight,
    };
    let min_agree = rows
        .iter()
        .map(|r| 100.0 * r.top1_agreement)
        .fold(100.0, f64::min);
    let agreement = Chart {
        title: "top-1 agreement with the full cache".into(),
        x: bytes_axis(),
        y: Axis::linear("% of positions").with_range((min_agree - 5.0).max(0.0), 101.5),
        series: points(|r| 100.0 * r.top1_agreement),
        legend: SeriesLabelPosition::LowerRight,
    };
    let svg = chart::svg((1200, 520), |root| {
        let (left, right) = root.split_horizontally(600);
        chart::draw(&left, &perplexity)?;
        chart::draw(&right, &agreement)
    })?;
    let parts: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{} {:.2} MiB ({:.0} %): perplexity {:.2}, top-1 {:.1} %",
                r.label,
                r.kv_cache_bytes as f64 / MIB,
                100.0 * r.kv_bytes_ratio,
                r.perplexity,
                100.0 * r.top1_agreement
            )
        })
        .collect();
    let what = format!(
        "Every KV policy on the same {} tokens of text, teacher-forced: perplexity (left) and top-1 agreement with the full cache (right) against the bytes the KV cache reserves. Full cache perplexity {:.2}; {}. The same numbers as a table: `kvlab eval-table`.",
        rows[0].n_tokens,
        full_ppl,
        parts.join("; ")
    );
    Ok((svg, what))
}

/// A decode step's median time against the context: the full cache's grows, a window's stays flat.
pub fn evict_speed(data: &Data) -> DrawResult<(String, String)> {
    let report = data.json("eval_evict_speed.json")?;
    let points = super::data::array(&report, "points")?;
    let mut caches: Vec<(String, Vec<&Value>)> = Vec::new();
    for p in points {
        let name = text(p, "cache")?;
        match caches.iter_mut().find(|(n, _)| *n == name) {
            Some((_, ps)) => ps.push(p),
            None => caches.push((name, vec![p])),
        }
    }
    let mut series = Vec::new();
    let mut parts = Vec::new();
    for (name, ps) in &caches {
        let pts: Vec<(f64, f64)> = ps
            .iter()
            .map(|p| Ok((num(p, "context")?, num(p, "step_ms")?)))
            .collect::<DrawResult<_>>()?;
        let color = if name == "full" { GREY } else { RED };
        series.push(Series::new(name, color, Style::LinePoints, pts));
        let cells: Vec<String> = ps
            .iter()
            .map(|p| {
                Ok(format!(
                    "{:.1} ms ({:.1} tokens/s, {} rows) at {}",
                    num(p, "step_ms")?,
                    num(p, "tokens_per_s")?,
                    num(p, "rows_attended")?,
                    num(p, "context")?
                ))
            })
            .collect::<DrawResult<_>>()?;
        parts.push(format!("{name}: {}", cells.join(", ")));
    }
    let chart = Chart {
        title: "one decode step as the text grows".into(),
        x: Axis::linear("position (tokens seen)"),
        y: Axis::linear("ms per step (median)"),
        series,
        legend: SeriesLabelPosition::UpperLeft,
    };
    let svg = chart::svg(chart::SIZE, |root| chart::draw(root, &chart))?;
    let what = format!(
        "Median time of one decode step ({} timed steps) after the text's first tokens, full cache vs a sliding window: {}.",
        num(&report, "reps")?,
        parts.join("; ")
    );
    Ok((svg, what))
}
