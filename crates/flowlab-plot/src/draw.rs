//! Drawing panels with plotters, to SVG or PNG.

use std::path::Path;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;

use plotters::element::DashedPathElement;

use crate::{Panel, PlotError, Series};

/// The font every text is set in, compiled in so that no system font is needed
/// (DejaVu Sans; licence in assets/DejaVuSans-LICENSE.txt).
static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
pub(crate) const FAMILY: &str = "sans-serif";

/// Height of one panel, pixels (a stack of panels is this tall each).
pub const PANEL_HEIGHT: u32 = 420;
pub const WIDTH: u32 = 1000;

pub(crate) fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is a fixed, valid TrueType file; a failure would show up in every test.
        let _ = plotters::style::register_font(FAMILY, FontStyle::Normal, FONT);
    });
}

pub(crate) fn err(e: impl std::fmt::Display) -> PlotError {
    PlotError::Draw(e.to_string())
}

/// Draws `panels` stacked into an SVG document.
pub fn render_svg(panels: &[Panel]) -> Result<String, PlotError> {
    register_font();
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, PANEL_HEIGHT * panels.len() as u32))
            .into_drawing_area();
        draw_all(&root, panels)?;
        root.present().map_err(err)?;
    }
    Ok(out)
}

/// Draws `panels` into `path`, SVG or PNG by its extension.
pub fn render_file(panels: &[Panel], path: &Path) -> Result<(), PlotError> {
    register_font();
    let size = (WIDTH, PANEL_HEIGHT * panels.len() as u32);
    match path.extension().and_then(|e| e.to_str()) {
        Some("svg") => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            draw_all(&root, panels)?;
            root.present().map_err(err)
        }
        Some("png") => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            draw_all(&root, panels)?;
            root.present().map_err(err)
        }
        _ => Err(PlotError::Format(path.display().to_string())),
    }
}

fn draw_all<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    panels: &[Panel],
) -> Result<(), PlotError> {
    root.fill(&WHITE).map_err(err)?;
    for (area, panel) in root.split_evenly((panels.len(), 1)).iter().zip(panels) {
        draw_panel(area, panel)?;
    }
    Ok(())
}

/// The colour of the `i`-th of a kind, or the one it asks for ([`crate::series::GREY`]
/// is grey).
fn colour_of(asked: Option<usize>, i: usize) -> RGBColor {
    match asked {
        Some(crate::series::GREY) => RGBColor(110, 110, 110),
        Some(c) => colour(c),
        None => colour(i),
    }
}

/// A tick's number without needless decimals: "1000", "0.5", "12.5" (never "1000.0").
fn tick_number(v: f64) -> String {
    let text = format!("{v:.6}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".into()
    } else {
        text.into()
    }
}

/// Distinct colours for lines, in order (plotters' Palette99 without the pale ones).
fn colour(i: usize) -> RGBColor {
    const C: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(23, 190, 207),
    ];
    C[i % C.len()]
}

/// Every point drawn: lines and markers as they are, bands by their upper edge.
fn points(panel: &Panel) -> impl Iterator<Item = (f64, f64)> + '_ {
    let lines = panel.series.iter().chain(&panel.markers);
    lines
        .chain(&panel.dots)
        .chain(&panel.dashed)
        .flat_map(|s| s.points.iter().copied())
        .chain(
            panel
                .bands
                .iter()
                .chain(&panel.error_bars)
                .flat_map(|b| b.points.iter().map(|p| (p.0, p.2))),
        )
}

/// The x range of the data and the top of the y axis (y starts at 0).
fn bounds(panel: &Panel) -> (f64, f64, f64) {
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for (x, y) in points(panel) {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    // Room above the data for the legend (upper right): a line per entry takes about
    // 6 % of the plot's height, so the data stays below the legend.
    let entries = panel.series.len()
        + if one_dashed_entry(&panel.dashed) {
            1
        } else {
            panel.dashed.len()
        }
        + panel.bands.len()
        + panel
            .markers
            .iter()
            .filter(|m| !m.points.is_empty())
            .count();
    let headroom = 1.0 / (1.0 - (0.04 + 0.06 * entries as f64).min(0.75));
    (x0, x1, if y1 > 0.0 { y1 * headroom } else { 1.0 })
}

/// Whether the dashed lines are one thing of several series (an ideal each: "ideal,
/// distance=near", "ideal, distance=far"), named once in the legend.
fn one_dashed_entry(dashed: &[Series]) -> bool {
    let prefix = |s: &Series| s.name.split(',').next().unwrap_or("").to_string();
    let named_once = dashed.len() > 1 || dashed.iter().any(|s| s.name.contains(','));
    named_once && dashed.iter().all(|s| prefix(s) == prefix(&dashed[0]))
}

/// The legend's one entry for all dashed lines: their common name before the first
/// comma (`ideal, distance=long` → `ideal (dashed)`).
fn dashed_label(dashed: &[Series]) -> String {
    let first = dashed.first().map_or("", |s| s.name.as_str());
    format!("{} (dashed)", first.split(',').next().unwrap_or(first))
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
) -> Result<(), PlotError> {
    let (mut x0, mut x1, y1) = bounds(panel);
    if !panel.x_ticks.is_empty() {
        (x0, x1) = (-0.5, panel.x_ticks.len() as f64 - 0.5);
    } else if !panel.error_bars.is_empty() {
        // A numeric sweep: room for the bars at either end.
        let pad = (x1 - x0) * 0.03;
        (x0, x1) = (x0 - pad, x1 + pad);
    }
    let ticks = &panel.x_ticks;
    let tick_label = |x: &f64| -> String {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            ticks.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    // A log axis labels the round values among its many ticks, 1, 2 and 5 × 10ⁿ.
    let log_label = |x: &f64| -> String {
        let v = 10f64.powf(*x);
        let decade = 10f64.powf(x.floor());
        [1.0, 2.0, 5.0, 10.0]
            .iter()
            .map(|m| m * decade)
            .find(|round| (v / round - 1.0).abs() < 0.01)
            .map_or_else(String::new, tick_number)
    };
    let y_label = |y: &f64| tick_number(*y);
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, (FAMILY, 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, 0.0..y1)
        .map_err(err)?;
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(&panel.x_label)
        .y_desc(&panel.y_label)
        .label_style((FAMILY, 13))
        .axis_desc_style((FAMILY, 15))
        .light_line_style(RGBColor(235, 235, 235));
    mesh.y_label_formatter(&y_label);
    if !ticks.is_empty() {
        mesh.x_labels(ticks.len()).x_label_formatter(&tick_label);
    } else if panel.x_log {
        mesh.x_labels(60).x_label_formatter(&log_label);
    } else {
        mesh.x_label_formatter(&y_label);
    }
    mesh.draw().map_err(err)?;
    if !ticks.is_empty() {
        // Each category's mean as a dot (a grey line's dots are drawn in each cell's
        // colour, as `dots`).
        for (i, s) in panel
            .series
            .iter()
            .enumerate()
            .filter(|(_, s)| s.colour != Some(crate::series::GREY))
        {
            let c = colour_of(s.colour, i);
            chart
                .draw_series(
                    s.points
                        .iter()
                        .filter(|p| !p.1.is_nan())
                        .map(|&p| Circle::new(p, 4, c.filled())),
                )
                .map_err(err)?;
        }
    }
    for (i, band) in panel.bands.iter().enumerate() {
        let c = colour_of(band.colour, i);
        let mut outline: Vec<(f64, f64)> = band.points.iter().map(|p| (p.0, p.2)).collect();
        outline.extend(band.points.iter().rev().map(|p| (p.0, p.1)));
        chart
            .draw_series(std::iter::once(Polygon::new(outline, c.mix(0.18).filled())))
            .map_err(err)?
            .label(band.name.as_str())
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 16, y + 5)], c.mix(0.18).filled())
            });
    }
    for (i, bars) in panel.error_bars.iter().enumerate() {
        let c = colour_of(bars.colour, i);
        // Caps a tenth of a category wide (or of the x range on a numeric axis).
        let cap = if ticks.is_empty() {
            (x1 - x0) / 100.0
        } else {
            0.05
        };
        chart
            .draw_series(bars.points.iter().flat_map(|&(x, lo, hi)| {
                [
                    PathElement::new(vec![(x, lo), (x, hi)], c.stroke_width(2)),
                    PathElement::new(vec![(x - cap, lo), (x + cap, lo)], c.stroke_width(2)),
                    PathElement::new(vec![(x - cap, hi), (x + cap, hi)], c.stroke_width(2)),
                ]
            }))
            .map_err(err)?;
    }
    for (i, d) in panel.dots.iter().enumerate() {
        let c = colour_of(d.colour, i);
        chart
            .draw_series(
                d.points
                    .iter()
                    .map(|&p| Circle::new(p, 3, c.mix(0.6).filled())),
            )
            .map_err(err)?;
    }
    for (i, s) in panel.series.iter().enumerate() {
        let c = colour_of(s.colour, i);
        // A point whose y is NaN breaks the line (a category that is not on the same
        // scale as its neighbours); the legend names the series once.
        let mut runs = s.points.split(|p| p.1.is_nan()).filter(|r| !r.is_empty());
        let first = runs.next().unwrap_or(&[]);
        chart
            .draw_series(LineSeries::new(first.iter().copied(), c.stroke_width(2)))
            .map_err(err)?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
        for run in runs {
            chart
                .draw_series(LineSeries::new(run.iter().copied(), c.stroke_width(2)))
                .map_err(err)?;
        }
    }
    // Dashed lines in their series' colours; the legend names them once, in grey, when
    // they are one thing of several series (an ideal each), else each in its colour.
    let one_entry = one_dashed_entry(&panel.dashed);
    for (i, s) in panel.dashed.iter().enumerate() {
        let c = colour_of(s.colour, i);
        let style = ShapeStyle {
            color: c.to_rgba(),
            filled: false,
            stroke_width: 2,
        };
        for (k, run) in s
            .points
            .split(|p| p.1.is_nan())
            .filter(|r| !r.is_empty())
            .enumerate()
        {
            let drawn = chart
                .draw_series(DashedLineSeries::new(run.iter().copied(), 6, 4, style))
                .map_err(err)?;
            if one_entry && i == 0 && k == 0 {
                let grey = RGBColor(90, 90, 90);
                drawn
                    .label(dashed_label(&panel.dashed))
                    .legend(move |(x, y)| {
                        DashedPathElement::new(
                            vec![(x, y), (x + 16, y)],
                            4,
                            3,
                            grey.stroke_width(2),
                        )
                    });
            } else if !one_entry && k == 0 {
                drawn.label(s.name.as_str()).legend(move |(x, y)| {
                    DashedPathElement::new(vec![(x, y), (x + 16, y)], 4, 3, c.stroke_width(2))
                });
            }
        }
    }
    // Marks as rings, so the lines they sit on stay visible.
    for m in panel.markers.iter().filter(|m| !m.points.is_empty()) {
        let c = RGBColor(214, 39, 40);
        chart
            .draw_series(
                m.points
                    .iter()
                    .map(|&p| Circle::new(p, 4, c.stroke_width(1))),
            )
            .map_err(err)?
            .label(m.name.as_str())
            .legend(move |(x, y)| Circle::new((x + 8, y), 4, c.stroke_width(1)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FAMILY, 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(err)?;
    Ok(())
}
