//! A small SVG line chart, written by hand: a grid of panels, each with axes, round
//! tick values and lines (straight, or steps for quantities that jump, like memory).
//! About a hundred lines instead of a plotting crate: `kvlab trace` needs no more.

use std::fmt::Write;

/// One line of a panel.
pub struct Series {
    pub name: String,
    /// An SVG colour: `"#1f77b4"`.
    pub color: &'static str,
    pub points: Vec<(f64, f64)>,
    /// Draw as a staircase (the value holds until the next point), not a slope.
    pub step: bool,
}

/// One chart: its lines, and the top of its y axis (shared across a row to compare).
pub struct Panel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    pub y_max: f64,
}

const W: f64 = 380.0;
const H: f64 = 250.0;
/// Margins around each panel's plot area.
const LEFT: f64 = 62.0;
const RIGHT: f64 = 14.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 44.0;

/// Round tick spacing: 1, 2 or 5 x 10^k, about 5 ticks up to `max`.
fn tick_step(max: f64) -> f64 {
    let raw = (max / 5.0).max(f64::MIN_POSITIVE);
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * mag)
}

fn label(v: f64) -> String {
    if v == v.round() {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Draws `rows` of panels under `title`; returns the SVG document.
pub fn render(title: &str, rows: &[Vec<Panel>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(1);
    let (width, height) = (W * cols as f64, H * rows.len() as f64 + 36.0);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        width / 2.0,
        escape(title)
    );
    for (r, row) in rows.iter().enumerate() {
        for (c, panel) in row.iter().enumerate() {
            draw_panel(&mut s, panel, W * c as f64, 36.0 + H * r as f64);
        }
    }
    s.push_str("</svg>\n");
    s
}

fn draw_panel(s: &mut String, p: &Panel, x0: f64, y0: f64) {
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let x_max = p
        .series
        .iter()
        .flat_map(|l| l.points.iter().map(|pt| pt.0))
        .fold(1.0f64, f64::max);
    let y_max = p.y_max.max(f64::MIN_POSITIVE);
    let px = |x: f64| x0 + LEFT + x / x_max * pw;
    let py = |y: f64| y0 + TOP + ph - y / y_max * ph;
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle" font-size="13">{}</text>"#,
        x0 + LEFT + pw / 2.0,
        y0 + 18.0,
        escape(&p.title)
    );
    // Axes, grid and ticks.
    let _ = writeln!(
        s,
        r##"<rect x="{}" y="{}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>"##,
        x0 + LEFT,
        y0 + TOP
    );
    for (max, vertical) in [(y_max, true), (x_max, false)] {
        let step = tick_step(max);
        let mut v = 0.0;
        while v <= max * 1.0001 {
            if vertical {
                let y = py(v);
                let _ = writeln!(
                    s,
                    r##"<line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
                    x0 + LEFT,
                    x0 + LEFT + pw,
                    x0 + LEFT - 4.0,
                    y + 4.0,
                    label(v)
                );
            } else {
                let x = px(v);
                let _ = writeln!(
                    s,
                    r#"<text x="{x}" y="{}" text-anchor="middle">{}</text>"#,
                    y0 + TOP + ph + 14.0,
                    label(v)
                );
            }
            v += step;
        }
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        x0 + LEFT + pw / 2.0,
        y0 + H - 10.0,
        escape(&p.x_label)
    );
    let (lx, ly) = (x0 + 14.0, y0 + TOP + ph / 2.0);
    let _ = writeln!(
        s,
        r#"<text x="{lx}" y="{ly}" text-anchor="middle" transform="rotate(-90 {lx} {ly})">{}</text>"#,
        escape(&p.y_label)
    );
    // Lines, then the legend.
    for (i, line) in p.series.iter().enumerate() {
        let mut pts = String::new();
        let mut prev: Option<(f64, f64)> = None;
        for &(x, y) in &line.points {
            if let (true, Some((_, py0))) = (line.step, prev) {
                let _ = write!(pts, "{:.1},{:.1} ", px(x), py(py0));
            }
            let _ = write!(pts, "{:.1},{:.1} ", px(x), py(y));
            prev = Some((x, y));
        }
        let _ = writeln!(
            s,
            r#"<polyline points="{pts}" fill="none" stroke="{}" stroke-width="2"/>"#,
            line.color
        );
        let ly = y0 + TOP + 12.0 + 14.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
            x0 + LEFT + 8.0,
            ly - 4.0,
            x0 + LEFT + 24.0,
            ly - 4.0,
            line.color,
            x0 + LEFT + 28.0,
            ly,
            escape(&line.name)
        );
    }
}
