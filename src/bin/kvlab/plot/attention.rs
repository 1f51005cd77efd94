//! The attention figures (`kvlab attention-map`): one head's probabilities as a heat map
//! (the causal mask is its upper triangle), and per layer the mean attention on the first
//! token (the attention sink).

use super::chart::{self, Axis, Chart, DrawResult, Series, Style, PURPLE};
use super::data::{array, num, nums, Data};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// White (0) to dark blue (1), on a square-root scale so small weights still show.
fn color(p: f64) -> RGBColor {
    let s = p.clamp(0.0, 1.0).sqrt();
    let mix = |a: f64, b: f64| (a + (b - a) * s).round() as u8;
    RGBColor(mix(255.0, 8.0), mix(255.0, 48.0), mix(255.0, 107.0))
}

/// The masked cells: never computed.
const MASKED: RGBColor = RGBColor(225, 225, 225);

/// A token as an axis label: visible whitespace, no markup characters.
fn label(token: &str) -> String {
    let t = token.replace('\n', "\\n").replace(['<', '>', '&', '"'], "");
    let t = if t.trim().is_empty() {
        format!("'{t}'")
    } else {
        t.trim().to_string()
    };
    t.chars().take(12).collect()
}

pub fn attention_map(data: &Data) -> DrawResult<(String, String)> {
    let a = data.json("attention.json")?;
    let probs: Vec<Vec<f64>> = array(&a, "probs")?
        .iter()
        .map(|row| {
            row.as_array()
                .map(|r| r.iter().filter_map(|p| p.as_f64()).collect())
                .ok_or("probs is not a matrix".into())
        })
        .collect::<DrawResult<_>>()?;
    let tokens: Vec<String> = array(&a, "tokens")?
        .iter()
        .map(|t| label(t.as_str().unwrap_or("?")))
        .collect();
    let t = probs.len();
    if t == 0 || probs.iter().any(|r| r.len() != t) || tokens.len() != t {
        return Err("probs must be [t][t] with t tokens".into());
    }
    let (layer, head) = (num(&a, "layer")?, num(&a, "head")?);
    let masked_nonzero = (0..t)
        .flat_map(|i| (i + 1..t).map(move |j| (i, j)))
        .filter(|&(i, j)| probs[i][j] != 0.0)
        .count();
    let worst_row = probs
        .iter()
        .map(|r| (r.iter().sum::<f64>() - 1.0).abs())
        .fold(0.0, f64::max);
    let on_first = probs.iter().skip(1).map(|r| r[0]).sum::<f64>() / (t - 1).max(1) as f64;
    let on_self = probs
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, r)| r[i])
        .sum::<f64>()
        / (t - 1).max(1) as f64;
    let title =
        format!("Attention weights, layer {layer:.0}, head {head:.0}: row = query, column = key");
    let svg = chart::svg((820, 800), |root| {
        let mut ctx = ChartBuilder::on(root)
            .caption(&title, ("sans-serif", 17))
            .margin(14)
            .margin_right(70)
            .x_label_area_size(100)
            .y_label_area_size(100)
            .build_cartesian_2d(0.0..t as f64, 0.0..t as f64)?;
        ctx.configure_mesh()
            .disable_mesh()
            .x_labels(0)
            .y_labels(0)
            .x_desc("key position j (attended to)")
            .y_desc("query position i")
            .axis_desc_style(("sans-serif", 14))
            .draw()?;
        // Row i at the top for i = 0: y runs from t (top) down to 0.
        ctx.draw_series(
            (0..t)
                .flat_map(|i| (0..t).map(move |j| (i, j)))
                .map(|(i, j)| {
                    let fill = if j > i { MASKED } else { color(probs[i][j]) };
                    let (x, y) = (j as f64, (t - i) as f64);
                    Rectangle::new([(x, y), (x + 1.0, y - 1.0)], fill.filled())
                }),
        )?;
        let font = ("sans-serif", 11).into_font();
        for (k, tok) in tokens.iter().enumerate() {
            let (x, y) = ctx.backend_coord(&(k as f64 + 0.5, 0.0));
            root.draw(&Text::new(
                tok.clone(),
                (x - 4, y + 6),
                TextStyle::from(font.clone().transform(FontTransform::Rotate90))
                    .pos(Pos::new(HPos::Left, VPos::Center)),
            ))?;
            let (x, y) = ctx.backend_coord(&(0.0, (t - k) as f64 - 0.5));
            root.draw(&Text::new(
                format!("{tok} {k}"),
                (x - 6, y),
                TextStyle::from(font.clone()).pos(Pos::new(HPos::Right, VPos::Center)),
            ))?;
        }
        // The colour scale.
        let (x0, y_top) = ctx.backend_coord(&(t as f64, t as f64));
        let (_, y_bottom) = ctx.backend_coord(&(t as f64, 0.0));
        let (x0, h) = (x0 + 16, (y_bottom - y_top).max(1));
        for k in 0..h {
            let p = 1.0 - k as f64 / h as f64;
            root.draw(&Rectangle::new(
                [(x0, y_top + k), (x0 + 14, y_top + k + 1)],
                color(p * p).filled(),
            ))?;
        }
        for p in [0.0, 0.01, 0.1, 0.25, 0.5, 1.0] {
            let y = y_top + ((1.0 - f64::sqrt(p)) * h as f64) as i32;
            root.draw(&Text::new(
                format!("{p}"),
                (x0 + 18, y),
                TextStyle::from(font.clone()).pos(Pos::new(HPos::Left, VPos::Center)),
            ))?;
        }
        Ok(())
    })?;
    let what = format!(
        "Attention probabilities of layer {layer:.0}, head {head:.0} of {} on the {t}-token prompt \"{}\" (`lab::attention_map`, the engine's arithmetic: each row is softmax(q_i · Kᵀ / √d) over keys 0..=i). Colour on a square-root scale; grey cells lie above the diagonal: the causal mask, where the score is never computed and the probability is exactly 0 ({masked_nonzero} of {} such cells are not 0; every row sums to 1 within {worst_row:.1e}). On average a query puts {:.0}% of its attention on the first token and {:.0}% on itself.",
        a.get("model").and_then(|m| m.as_str()).map(|m| m.rsplit('/').next().unwrap_or(m)).unwrap_or("the model"),
        a.get("prompt").and_then(|p| p.as_str()).unwrap_or(""),
        t * (t - 1) / 2,
        100.0 * on_first,
        100.0 * on_self,
    );
    Ok((svg, what))
}

pub fn attention_sink(data: &Data) -> DrawResult<(String, String)> {
    let a = data.json("attention.json")?;
    let mass = nums(&a, "first_token_mass")?;
    let t = array(&a, "probs")?.len();
    let points: Vec<(f64, f64)> = mass
        .iter()
        .enumerate()
        .map(|(l, &m)| (l as f64, m))
        .collect();
    let uniform: Vec<(f64, f64)> = (0..mass.len())
        .map(|l| {
            // A query at position i spreading evenly puts 1/(i+1) on token 0; mean over i = 1..t-1.
            let u = (1..t).map(|i| 1.0 / (i + 1) as f64).sum::<f64>() / (t - 1).max(1) as f64;
            (l as f64, u)
        })
        .collect();
    let chart = Chart {
        title: "The attention sink: mean attention on the first token, per layer".into(),
        x: Axis::linear("layer").with_range(-0.5, mass.len() as f64 - 0.5),
        y: Axis::linear("mean probability on token 0").with_range(0.0, 1.0),
        series: vec![
            Series::new(
                "measured (mean over heads and queries 1..t-1)",
                PURPLE,
                Style::LinePoints,
                points,
            ),
            Series::new(
                "if every query spread its attention evenly",
                super::chart::GREY,
                Style::Dashed,
                uniform.clone(),
            ),
        ],
        legend: SeriesLabelPosition::LowerRight,
    };
    let svg = chart::svg(chart::SIZE, |root| chart::draw(root, &chart))?;
    let (argmax, max) =
        mass.iter().enumerate().fold(
            (0, 0.0),
            |best, (l, &m)| if m > best.1 { (l, m) } else { best },
        );
    let above_half = mass.iter().filter(|&&m| m > 0.5).count();
    let what = format!(
        "From the same run: for each of the {} layers, the attention probability on the first token, averaged over all heads and over query positions 1..{} (position 0 can only attend to itself). Even spreading would give {:.2}. Layers 0 and 1 put {:.2} and {:.2} there; {above_half} of {} layers put more than half of all attention on that one token, up to {max:.2} in layer {argmax}: the \"attention sink\" (Xiao et al. 2023), a place for attention that a head does not need elsewhere.",
        mass.len(),
        t - 1,
        uniform.first().map_or(0.0, |u| u.1),
        mass.first().copied().unwrap_or(0.0),
        mass.get(1).copied().unwrap_or(0.0),
        mass.len(),
    );
    Ok((svg, what))
}
