//! The speculative-decoding figures (chapter "Speculative decoding", section "Sweeping
//! drafters and k"): for one prompt, the measured speedup against the draft length `k`
//! for each drafter (solid), Leviathan et al.'s prediction from the measured acceptance
//! rate (dashed), a line at 1x (slower below it), and the acceptance rate beside it.
//! Read from `kvlab spec-sweep --json`.

use super::chart::{self, Axis, Chart, Series, Style, BLUE, GREEN, GREY, PURPLE, RED};
use super::data::{array, field, num, Data};
use chart::DrawResult;
use plotters::prelude::*;
use serde_json::Value;

const COLORS: [RGBColor; 4] = [BLUE, RED, GREEN, PURPLE];

pub fn spec_sweep_fix_typos(data: &Data) -> DrawResult<(String, String)> {
    spec_sweep(
        data,
        "spec_sweep_fix_typos.json",
        "an input-grounded prompt (fix the typos: the answer copies the input)",
    )
}

pub fn spec_sweep_story(data: &Data) -> DrawResult<(String, String)> {
    spec_sweep(
        data,
        "spec_sweep_story.json",
        "an open-ended prompt (write a story)",
    )
}

/// One drafter's cells, in the order of `k`.
struct Drafter<'a> {
    name: String,
    cells: Vec<&'a Value>,
}

fn drafters(cells: &[Value]) -> DrawResult<Vec<Drafter<'_>>> {
    let mut out: Vec<Drafter> = Vec::new();
    for cell in cells {
        let name = field(cell, "drafter")?
            .as_str()
            .ok_or("field \"drafter\" is not text")?
            .to_string();
        match out.iter_mut().find(|d| d.name == name) {
            Some(d) => d.cells.push(cell),
            None => out.push(Drafter {
                name,
                cells: vec![cell],
            }),
        }
    }
    for d in &mut out {
        d.cells.sort_by(|a, b| {
            num(a, "k")
                .unwrap_or(0.0)
                .total_cmp(&num(b, "k").unwrap_or(0.0))
        });
    }
    Ok(out)
}

fn spec_sweep(data: &Data, file: &str, prompt: &str) -> DrawResult<(String, String)> {
    let report = data.json(file)?;
    let cells = array(&report, "cells")?;
    if cells.is_empty() {
        return Err(format!("{file} has no cells").into());
    }
    let drafters = drafters(cells)?;
    let pts = |d: &Drafter, key: &str| -> DrawResult<Vec<(f64, f64)>> {
        d.cells
            .iter()
            .map(|c| Ok((num(c, "k")?, num(c, key)?)))
            .collect()
    };
    let ks: Vec<f64> = cells.iter().filter_map(|c| c.get("k")?.as_f64()).collect();
    let (k_lo, k_hi) = ks
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &k| {
            (lo.min(k), hi.max(k))
        });
    let mut speed_max: f64 = 1.5;
    let mut speed = Vec::new();
    let mut accept = Vec::new();
    for (i, d) in drafters.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let measured = pts(d, "speedup_total")?;
        let predicted = pts(d, "predicted_speedup")?;
        for p in measured.iter().chain(&predicted) {
            speed_max = speed_max.max(p.1);
        }
        speed.push(Series::new(
            &format!("{} measured", d.name),
            color,
            Style::LinePoints,
            measured,
        ));
        speed.push(Series::new(
            &format!("{} predicted (dashed)", d.name),
            color,
            Style::Dashed,
            predicted,
        ));
        accept.push(Series::new(
            &d.name,
            color,
            Style::LinePoints,
            pts(d, "acceptance_rate")?,
        ));
    }
    speed.push(Series::new(
        "",
        GREY,
        Style::Dashed,
        vec![(k_lo, 1.0), (k_hi, 1.0)],
    ));
    let x_range = (k_lo - 0.3, k_hi + 0.3);
    let speedup = Chart {
        title: "speedup over plain decoding".into(),
        x: Axis::linear("draft length k").with_range(x_range.0, x_range.1),
        y: Axis::linear("x plain (above 1 = faster)").with_range(0.0, speed_max * 1.25),
        series: speed,
        legend: SeriesLabelPosition::UpperLeft,
    };
    let acceptance = Chart {
        title: "acceptance rate α".into(),
        x: Axis::linear("draft length k").with_range(x_range.0, x_range.1),
        y: Axis::linear("accepted / drafted").with_range(0.0, 1.05),
        series: accept,
        legend: SeriesLabelPosition::MiddleRight,
    };
    let svg = chart::svg((1100, 480), |root| {
        let (left, right) = root.split_horizontally(660);
        chart::draw(&left, &speedup)?;
        chart::draw(&right, &acceptance)
    })?;
    let what = format!(
        "Speculative decoding on {prompt}: {} prompt tokens, {} new tokens, plain decoding {:.1} ms per token. {}",
        num(&report, "prompt_tokens")?,
        num(&report, "new_tokens")?,
        num(&report, "plain_tpot_ms")?,
        summary(&drafters)?,
    );
    Ok((svg, what))
}

/// Per drafter: its best measured speedup, at which `k`, with α and the prediction there.
fn summary(drafters: &[Drafter]) -> DrawResult<String> {
    let mut parts = Vec::new();
    for d in drafters {
        let mut best: Option<&Value> = None;
        for c in &d.cells {
            if best.is_none_or(|b| {
                num(c, "speedup_total").unwrap_or(0.0) > num(b, "speedup_total").unwrap_or(0.0)
            }) {
                best = Some(c);
            }
        }
        let Some(b) = best else { continue };
        parts.push(format!(
            "{}: best {:.2}x at k = {} (α = {:.2}, predicted {:.2}x)",
            d.name,
            num(b, "speedup_total")?,
            num(b, "k")?,
            num(b, "acceptance_rate")?,
            num(b, "predicted_speedup")?,
        ));
    }
    Ok(format!(
        "Measured speedup (solid, total time with prefill) and Leviathan et al.'s prediction from the measured α (dashed); {}.",
        parts.join("; ")
    ))
}
