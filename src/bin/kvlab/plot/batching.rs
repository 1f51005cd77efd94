//! The serving figures (chapter "Scheduling prefill and decode"), from
//! `kvlab bench-batch --json`: output tokens/s against the number of concurrent
//! requests (continuous batching vs one at a time, with the bandwidth roof's
//! prediction), and the decode-stall timeline (each iteration's length while a long
//! prompt is prefilled whole or in chunks).

use super::chart::{self, Axis, Chart, Series, Style, BLUE, GREY, RED};
use super::data::{array, field, num, Data};
use chart::DrawResult;
use plotters::prelude::*;
use serde_json::Value;

const FILE: &str = "batching.json";

pub fn batch_throughput(data: &Data) -> DrawResult<(String, String)> {
    let report = data.json(FILE)?;
    let points = array(&report, "points")?;
    let roof_step_ms = num(&report, "roof_step_ms")?;
    let chart = throughput_chart(&report)?;
    let svg = chart::svg(chart::SIZE, |root| chart::draw(root, &chart))?;
    let mut parts = Vec::new();
    let mut of_roof = Vec::new();
    let mut all_identical = true;
    for p in points {
        let c = num(p, "concurrency")?;
        of_roof.push(format!(
            "{c}: {:.0}%",
            100.0 * num(p, "continuous_tok_s")? / roof_tok_s(c, roof_step_ms)
        ));
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
        "Output tokens/s of greedy requests all submitted at once through the continuous engine (blue) and run one at a time (red); the dashed line is the bandwidth roof's prediction, c tokens per {roof_step_ms:.1} ms weight stream (y axis logarithmic). Speedup of batching, by number of requests: {}. Continuous batching's share of the roof: {}. {}",
        parts.join(", "),
        of_roof.join(", "),
        if all_identical {
            "Tokens identical between the two in every run."
        } else {
            "THE TOKENS DIFFER in at least one run: a bug."
        }
    );
    Ok((svg, what))
}

/// The roofline's prediction at `c` concurrent requests: c decode rows cost one weight
/// stream of `roof_step_ms`.
fn roof_tok_s(c: f64, roof_step_ms: f64) -> f64 {
    c * 1e3 / roof_step_ms
}

/// Tokens/s against concurrency: both engines and the bandwidth roof, the roof whole at
/// every concurrency. It grows c-fold while the measured lines flatten, an order of
/// magnitude below it at 16 requests, so the y axis is logarithmic and spans all three;
/// the x axis marks only the measured concurrencies (plotters' log axis draws a gridline
/// at every unit, a grey band between 5 and 11).
fn throughput_chart(report: &Value) -> DrawResult<Chart> {
    let points = array(report, "points")?;
    let pts = |key: &str| -> DrawResult<Vec<(f64, f64)>> {
        points
            .iter()
            .map(|p| Ok((num(p, "concurrency")?, num(p, key)?)))
            .collect()
    };
    let roof_step_ms = num(report, "roof_step_ms")?;
    let continuous = pts("continuous_tok_s")?;
    let sequential = pts("sequential_tok_s")?;
    let roof: Vec<(f64, f64)> = continuous
        .iter()
        .map(|&(c, _)| (c, roof_tok_s(c, roof_step_ms)))
        .collect();
    let ys = || {
        continuous
            .iter()
            .chain(&sequential)
            .chain(&roof)
            .map(|p| p.1)
            .filter(|y| y.is_finite() && *y > 0.0)
    };
    let y_lo = ys().fold(f64::INFINITY, f64::min);
    let y_hi = ys().fold(0.0, f64::max);
    let (y_lo, y_hi) = if y_lo.is_finite() && y_hi > 0.0 {
        (y_lo / 1.4, y_hi * 1.4)
    } else {
        (1.0, 10.0)
    };
    let c_max = continuous.iter().map(|p| p.0).fold(1.0, f64::max);
    let concurrencies: Vec<f64> = continuous.iter().map(|p| p.0).collect();
    // 1-2-5 ticks when they are enough to read the axis by (a span under a decade may
    // hold one or none of them): plotters' own otherwise.
    let mut y = Axis::log("output tokens/s (log scale)").with_range(y_lo, y_hi);
    let ticks = chart::log_ticks(y_lo, y_hi);
    if ticks.len() >= 3 {
        y = y.with_ticks(ticks);
    }
    Ok(Chart {
        title: "output tokens/s vs concurrent requests".into(),
        x: Axis::log("concurrent requests")
            .with_range(0.8, c_max * 1.25)
            .with_ticks(concurrencies),
        y,
        series: vec![
            Series::new("continuous batching", BLUE, Style::LinePoints, continuous),
            Series::new("one at a time", RED, Style::LinePoints, sequential),
            Series::new(
                "bandwidth roof: c rows per weight stream (dashed)",
                GREY,
                Style::Dashed,
                roof,
            ),
        ],
        legend: SeriesLabelPosition::UpperLeft,
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use chart::Scale;
    use serde_json::json;

    #[test]
    fn the_throughput_chart_holds_the_whole_roof_on_a_log_axis() {
        let roof_step_ms = 9.36;
        let points: Vec<Value> = [(1, 42.0, 45.0), (2, 43.0, 82.0), (4, 48.0, 127.0)]
            .into_iter()
            .chain([(8, 45.0, 202.0), (16, 46.0, 249.0)])
            .map(|(c, seq, cont)| {
                json!({"concurrency": c, "sequential_tok_s": seq, "continuous_tok_s": cont})
            })
            .collect();
        let report = json!({"roof_step_ms": roof_step_ms, "points": points});
        let chart = throughput_chart(&report).unwrap();
        let roof = chart
            .series
            .iter()
            .find(|s| s.name.starts_with("bandwidth roof"))
            .unwrap();
        // Every concurrency's roof point, none cut off, and all of them inside the y range.
        assert_eq!(roof.points.len(), 5);
        let (lo, hi) = chart.y.range.unwrap();
        for s in &chart.series {
            for &(_, y) in &s.points {
                assert!(lo <= y && y <= hi, "{} at {y} outside {lo}..{hi}", s.name);
            }
        }
        assert!(hi >= 16.0 * 1e3 / roof_step_ms);
        assert!(chart.y.scale == Scale::Log && chart.y.label.contains("log"));
        // The x gridlines: the measured concurrencies only.
        assert_eq!(chart.x.ticks, Some(vec![1.0, 2.0, 4.0, 8.0, 16.0]));
    }
}
