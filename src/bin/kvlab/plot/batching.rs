//! The serving figures (chapter "Scheduling prefill and decode"), from
//! `kvlab bench-batch --json`: output tokens/s against the number of concurrent
//! requests (continuous batching vs one at a time, with the bandwidth roof's
//! prediction), and the decode-stall timeline (each iteration's length while a long
//! prompt is prefilled whole or in chunks).

use super::chart::{self, Axis, Chart, Series, Style, BLUE, GREY, RED};
use super::data::{array, field, num, Data};
use chart::DrawResult;
use plotters::prelude::*;

const FILE: &str = "batching.json";

pub fn batch_throughput(data: &Data) -> DrawResult<(String, String)> {
    let report = data.json(FILE)?;
    let points = array(&report, "points")?;
    let pts = |key: &str| -> DrawResult<Vec<(f64, f64)>> {
        points
            .iter()
            .map(|p| Ok((num(p, "concurrency")?, num(p, key)?)))
            .collect()
    };
    let roof_step_ms = num(&report, "roof_step_ms")?;
    // The roofline's prediction: c decode rows cost one weight stream.
    let roof: Vec<(f64, f64)> = pts("continuous_tok_s")?
        .iter()
        .map(|&(c, _)| (c, c * 1e3 / roof_step_ms))
        .collect();
    let continuous = pts("continuous_tok_s")?;
    let sequential = pts("sequential_tok_s")?;
    let y_max = continuous
        .iter()
        .chain(&sequential)
        .map(|p| p.1)
        .fold(1.0, f64::max);
    let c_max = continuous.iter().map(|p| p.0).fold(1.0, f64::max);
    let chart = Chart {
        title: "output tokens/s vs concurrent requests".into(),
        x: Axis::log("concurrent requests").with_range(0.8, c_max * 1.25),
        y: Axis::linear("output tokens/s").with_range(0.0, y_max * 1.3),
        series: vec![
            Series::new(
                "continuous batching",
                BLUE,
                Style::LinePoints,
                continuous.clone(),
            ),
            Series::new("one at a time", RED, Style::LinePoints, sequential.clone()),
            Series::new(
                "bandwidth roof: c rows per weight stream (dashed)",
                GREY,
                Style::Dashed,
                roof.into_iter().filter(|p| p.1 <= y_max * 1.3).collect(),
            ),
        ],
        legend: SeriesLabelPosition::UpperLeft,
    };
    let svg = chart::svg(chart::SIZE, |root| chart::draw(root, &chart))?;
    let mut parts = Vec::new();
    let mut all_identical = true;
    for p in points {
        all_identical &= field(p, "tokens_identical")?.as_bool() == Some(true);
        parts.push(format!(
            "{}: {:.2}x{}",
            num(p, "concurrency")?,
            num(p, "speedup")?,
            if field(p, "tokens_identical")?.as_bool() == Some(true) {
                ""
            } else {
                " (tokens differ!)"
            }
        ));
    }
    let what = format!(
        "Output tokens/s of greedy requests all submitted at once through the continuous engine (blue) and run one at a time (red); the dashed line is the bandwidth roof's prediction, c tokens per {roof_step_ms:.1} ms weight stream. Speedup of batching, by number of requests: {}. {}",
        parts.join(", "),
        if all_identical {
            "Tokens identical between the two in every run."
        } else {
            "THE TOKENS DIFFER in at least one run: a bug."
        }
    );
    Ok((svg, what))
}

pub fn decode_stall(data: &Data) -> DrawResult<(String, String)> {
    let report = data.json(FILE)?;
    let runs = array(&report, "stall")?;
    let options = field(&report, "options")?;
    let mut series = Vec::new();
    let mut parts = Vec::new();
    let mut y_max: f64 = 1.0;
    for (run, color) in runs.iter().zip([RED, BLUE]) {
        let policy = field(run, "policy")?.as_str().unwrap_or("?").to_string();
        let pts: Vec<(f64, f64)> = array(run, "iterations")?
            .iter()
            .map(|it| Ok((num(it, "end_ms")?, num(it, "ms")?)))
            .collect::<DrawResult<_>>()?;
        y_max = pts.iter().map(|p| p.1).fold(y_max, f64::max);
        parts.push(format!(
            "{policy}: p99 ITL {:.0} ms, max {:.0} ms, long prompt's TTFT {:.0} ms",
            num(run, "p99_itl_ms")?,
            num(run, "max_itl_ms")?,
            num(run, "long_ttft_ms")?
        ));
        series.push(Series::new(&policy, color, Style::LinePoints, pts));
    }
    let chart = Chart {
        title: "iteration length while a long prompt arrives".into(),
        x: Axis::linear("time since the first iteration (ms)"),
        y: Axis::linear("iteration (ms) = the running requests' gap").with_range(0.0, y_max * 1.15),
        series,
        legend: SeriesLabelPosition::UpperRight,
    };
    let svg = chart::svg(chart::SIZE, |root| chart::draw(root, &chart))?;
    let what = format!(
        "{} requests decoding when a {}-token prompt arrives; each point is one iteration (its end, its length): every running request waits one iteration per token. Whole-prompt prefill (continuous, red) runs the prompt in one long iteration; chunked prefill (blue, token budget {}) in several short ones. {}.",
        num(options, "running")?,
        num(options, "long_prompt")?,
        num(options, "stall_budget")?,
        parts.join("; ")
    );
    Ok((svg, what))
}
