//! The one chart shape most figures share: lines, staircases and points on two axes,
//! linear or logarithmic, with a legend. Axes, ticks, log scales and the legend come from
//! plotters; this file only says which series to draw and how.

use plotters::coord::ranged1d::{
    AsRangedCoord, DefaultFormatting, KeyPointHint, Ranged, ValueFormatter,
};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::ops::Range;

pub type DrawResult<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The palette: colour-blind-safe (Okabe & Ito 2008).
pub const BLUE: RGBColor = RGBColor(0, 114, 178);
pub const GREEN: RGBColor = RGBColor(0, 158, 115);
pub const RED: RGBColor = RGBColor(213, 94, 0);
pub const PURPLE: RGBColor = RGBColor(204, 121, 167);
pub const GREY: RGBColor = RGBColor(110, 110, 110);

/// Size of a one-chart figure, in SVG pixels.
pub const SIZE: (u32, u32) = (760, 460);

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    Linear,
    Log,
}

pub struct Axis {
    pub label: String,
    pub scale: Scale,
    /// `None`: from the data (0 at the bottom on a linear axis).
    pub range: Option<(f64, f64)>,
    /// `Some`: ticks and gridlines at these values only (no light lines between them);
    /// `None`: plotters' own.
    pub ticks: Option<Vec<f64>>,
}

impl Axis {
    pub fn linear(label: &str) -> Axis {
        Axis {
            label: label.into(),
            scale: Scale::Linear,
            range: None,
            ticks: None,
        }
    }
    pub fn log(label: &str) -> Axis {
        Axis {
            label: label.into(),
            scale: Scale::Log,
            range: None,
            ticks: None,
        }
    }
    pub fn with_range(mut self, lo: f64, hi: f64) -> Axis {
        self.range = Some((lo, hi));
        self
    }
    /// Ticks and gridlines at `at` only (those inside the range).
    pub fn with_ticks(mut self, at: Vec<f64>) -> Axis {
        self.ticks = Some(at);
        self
    }
}

/// The 1-2-5 values (…, 10, 20, 50, 100, …) in `lo..=hi`: ticks for a log axis that
/// spans a decade or two, where plotters' own mark every unit between the powers of 10.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    if !(lo > 0.0 && hi >= lo && hi.is_finite()) {
        return out;
    }
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi {
        for m in [1.0, 2.0, 5.0] {
            let v = m * decade;
            if v >= lo && v <= hi {
                out.push(v);
            }
        }
        decade *= 10.0;
    }
    out
}

/// An axis's coordinate with its key points replaced by [`Axis::ticks`] when it has some.
struct Ticks<R> {
    inner: R,
    at: Option<Vec<f64>>,
}

impl<R: Ranged<ValueType = f64>> Ticks<R> {
    fn new(coord: impl Into<R>, axis: &Axis) -> Ticks<R> {
        Ticks {
            inner: coord.into(),
            at: axis.ticks.clone(),
        }
    }
}

impl<R: Ranged<ValueType = f64>> Ranged for Ticks<R> {
    type ValueType = f64;
    type FormatOption = DefaultFormatting;

    fn range(&self) -> Range<f64> {
        self.inner.range()
    }

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        let Some(at) = &self.at else {
            return self.inner.key_points(hint);
        };
        // The light gridlines are asked for with a hint that allows light points: none.
        if hint.weight().allow_light_points() {
            return Vec::new();
        }
        let r = self.inner.range();
        let (lo, hi) = (r.start.min(r.end), r.start.max(r.end));
        at.iter()
            .copied()
            .filter(|v| *v >= lo && *v <= hi)
            .collect()
    }

    fn axis_pixel_range(&self, limit: (i32, i32)) -> Range<i32> {
        self.inner.axis_pixel_range(limit)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Line,
    Dashed,
    /// The value holds until the next point (memory that jumps).
    Step,
    Points,
    LinePoints,
}

pub struct Series {
    pub name: String,
    pub color: RGBColor,
    pub style: Style,
    pub points: Vec<(f64, f64)>,
    /// Text written next to chosen points.
    pub notes: Vec<(f64, f64, String)>,
}

impl Series {
    pub fn new(name: &str, color: RGBColor, style: Style, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            color,
            style,
            points,
            notes: Vec::new(),
        }
    }
    pub fn note(mut self, x: f64, y: f64, text: String) -> Series {
        self.notes.push((x, y, text));
        self
    }
}

pub struct Chart {
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
    pub legend: SeriesLabelPosition,
}

/// A number as a tick label: no trailing zeros, k/M for big ones.
pub fn tick(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e4 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = if v.abs() >= 100.0 || v == v.round() {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The range an axis spans: its own, or the data's with some room.
fn span(axis: &Axis, values: impl Iterator<Item = f64>) -> (f64, f64) {
    if let Some(r) = axis.range {
        return r;
    }
    let (lo, hi) = values
        .filter(|v| v.is_finite() && (axis.scale == Scale::Linear || *v > 0.0))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    let (lo, hi) = if lo.is_finite() {
        (lo, hi)
    } else {
        (1.0, 10.0)
    };
    match axis.scale {
        Scale::Linear => (lo.min(0.0), if hi > 0.0 { hi * 1.1 } else { 1.0 }),
        Scale::Log => (lo / 1.5, hi * 1.5),
    }
}

/// Draws `chart` into `area`.
pub fn draw<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, chart: &Chart) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let xs = span(
        &chart.x,
        chart
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0)),
    );
    let ys = span(
        &chart.y,
        chart
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1)),
    );
    let (x, y) = (xs.0..xs.1, ys.0..ys.1);
    let lin = |r: Range<f64>, axis: &Axis| Ticks::<RangedCoordf64>::new(r, axis);
    let log = |r: Range<f64>, axis: &Axis| Ticks::<LogCoord<f64>>::new(r.log_scale(), axis);
    let (ax, ay) = (&chart.x, &chart.y);
    match (ax.scale, ay.scale) {
        (Scale::Linear, Scale::Linear) => draw_in(area, chart, lin(x, ax), lin(y, ay)),
        (Scale::Linear, Scale::Log) => draw_in(area, chart, lin(x, ax), log(y, ay)),
        (Scale::Log, Scale::Linear) => draw_in(area, chart, log(x, ax), lin(y, ay)),
        (Scale::Log, Scale::Log) => draw_in(area, chart, log(x, ax), log(y, ay)),
    }
}

fn draw_in<DB, X, Y>(area: &DrawingArea<DB, Shift>, chart: &Chart, x: X, y: Y) -> DrawResult
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let mut ctx = ChartBuilder::on(area)
        .caption(&chart.title, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(64)
        .build_cartesian_2d(x, y)?;
    ctx.configure_mesh()
        .x_desc(chart.x.label.as_str())
        .y_desc(chart.y.label.as_str())
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| tick(*v))
        .light_line_style(RGBColor(238, 238, 238))
        .label_style(("sans-serif", 12))
        .axis_desc_style(("sans-serif", 14))
        .draw()?;
    for s in &chart.series {
        let color = s.color;
        let line = color.stroke_width(2);
        let points = s.points.clone();
        let anno = match s.style {
            Style::Line => ctx.draw_series(LineSeries::new(points, line))?,
            Style::Dashed => ctx.draw_series(DashedLineSeries::new(points, 8, 5, line))?,
            Style::Step => {
                let mut stairs = Vec::with_capacity(points.len() * 2);
                for (i, &(px, py)) in points.iter().enumerate() {
                    if i > 0 {
                        stairs.push((px, points[i - 1].1));
                    }
                    stairs.push((px, py));
                }
                ctx.draw_series(LineSeries::new(stairs, line))?
            }
            Style::Points => ctx.draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 5, color.filled())),
            )?,
            Style::LinePoints => {
                ctx.draw_series(LineSeries::new(points.clone(), line))?;
                ctx.draw_series(
                    points
                        .into_iter()
                        .map(|p| Circle::new(p, 4, color.filled())),
                )?
            }
        };
        if !s.name.is_empty() {
            anno.label(s.name.as_str()).legend(move |(lx, ly)| {
                PathElement::new(vec![(lx, ly), (lx + 22, ly)], color.stroke_width(3))
            });
        }
        for (nx, ny, text) in &s.notes {
            ctx.draw_series(std::iter::once(
                Text::new(
                    text.clone(),
                    (*nx, *ny),
                    ("sans-serif", 12).into_font().color(&color),
                )
                .into_dyn(),
            ))?;
        }
    }
    if chart.series.iter().any(|s| !s.name.is_empty()) {
        ctx.configure_series_labels()
            .position(chart.legend.clone())
            .background_style(WHITE.mix(0.9))
            .border_style(RGBColor(190, 190, 190))
            .label_font(("sans-serif", 12))
            .draw()?;
    }
    Ok(())
}

/// Renders `draw_fn` on an SVG canvas of `size` and returns the document.
pub fn svg(
    size: (u32, u32),
    draw_fn: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> DrawResult,
) -> DrawResult<String> {
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, size).into_drawing_area();
        root.fill(&WHITE)?;
        draw_fn(&root)?;
        root.present()?;
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use plotters::coord::ranged1d::BoldPoints;

    #[test]
    fn log_ticks_are_the_1_2_5_values_inside_the_range() {
        assert_eq!(
            log_ticks(30.0, 2400.0),
            vec![50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0]
        );
        assert_eq!(log_ticks(1.0, 1.0), vec![1.0]);
        assert!(log_ticks(0.0, 10.0).is_empty());
    }

    #[test]
    fn an_axis_with_ticks_has_gridlines_there_only() {
        let axis = Axis::log("c").with_ticks(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0]);
        let log = |axis: &Axis| Ticks::<LogCoord<f64>>::new((0.8..20.0).log_scale(), axis);
        let ticked = log(&axis);
        // Bold: the ticks inside the range; light (any weight): none.
        assert_eq!(
            ticked.key_points(BoldPoints(10)),
            vec![1.0, 2.0, 4.0, 8.0, 16.0]
        );
        assert!(ticked.key_points(100usize).is_empty());
        // Without ticks, plotters' own: a line per unit and more, the grey band.
        let own = log(&Axis::log("c"));
        assert!(own.key_points(100usize).len() > 10);
    }
}
