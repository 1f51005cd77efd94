//! The server's figure (chapter "A server: many clients, one engine"), from
//! `scripts/loadtest-policies.sh`'s reports: every token's gap to the token before it, as
//! a client of `kvlab serve` saw it, under whole-prompt and chunked prefill. A long
//! prompt's prefill shows as a column of tall gaps: every request decoding at that time
//! waited for it.

use super::chart::{self, Axis, Chart, Series, Style, BLUE, RED};
use super::data::{array, field, num, nums, Data};
use chart::DrawResult;
use plotters::prelude::*;

const RUNS: [(&str, RGBColor); 2] = [
    ("loadtest_continuous.json", RED),
    ("loadtest_continuous_chunked.json", BLUE),
];

pub fn loadtest_stalls(data: &Data) -> DrawResult<(String, String)> {
    let mut series = Vec::new();
    let mut parts = Vec::new();
    let mut y_max: f64 = 1.0;
    let mut workload = String::new();
    for (file, color) in RUNS {
        let report = data.json(file)?;
        let policy = field(&report, "policy")?
            .as_str()
            .unwrap_or("?")
            .to_string();
        // (arrival of a token in s, its gap to the previous token of its request in ms)
        let mut gaps = Vec::new();
        for request in array(&report, "per_request")? {
            let times = nums(request, "token_ms")?;
            gaps.extend(times.windows(2).map(|w| (w[1] / 1e3, w[1] - w[0])));
        }
        y_max = gaps.iter().map(|p| p.1).fold(y_max, f64::max);
        let itl = field(&report, "inter_token_ms")?;
        parts.push(format!(
            "{policy}: inter-token p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; short requests' TTFT p99 {:.0} ms",
            num(itl, "p50")?,
            num(itl, "p99")?,
            num(itl, "max")?,
            num(field(&report, "short_ttft_ms")?, "p99")?
        ));
        workload = format!(
            "{} requests, Poisson arrivals at {}/s, seed {}",
            num(&report, "requests")?,
            num(&report, "rate")?,
            num(&report, "seed")?
        );
        series.push(Series::new(&policy, color, Style::Points, gaps));
    }
    let chart = Chart {
        title: "gap before each token, as clients of kvlab serve saw it".into(),
        x: Axis::linear("time since the first request (s)"),
        y: Axis::log("gap to the previous token (ms)").with_range(1.0, y_max * 1.5),
        series,
        legend: SeriesLabelPosition::UpperRight,
    };
    let svg = chart::svg(chart::SIZE, |root| chart::draw(root, &chart))?;
    let what = format!(
        "Every streamed token's gap to the one before it ({workload}; short prompts and ~1000-token ones, measured by kvlab loadtest over HTTP), with whole prompts prefilled in one iteration (red) and in chunks under the token budget (blue). {}.",
        parts.join("; ")
    );
    Ok((svg, what))
}
