//! A study report's charts: a metric against the swept parameter with the most values,
//! one line per combination of the other parameters, each mean with its confidence
//! interval as an error bar; a value off the others' scale (`adaptive` among ratios)
//! drawn apart, not joined to them.

use flowlab_report::study_report::{metric_unit, quantity, title};
use flowlab_results::study_report::{MetricTable, StudyReport, series_name, x_axis};

use crate::{Band, Panel, Series};

/// The series of report `r` (each combination of the parameters other than the x axis'),
/// in the order of its cells: what gives a series its colour in every chart.
fn report_series(r: &StudyReport) -> Vec<String> {
    let x_param = x_axis(&r.params);
    let mut names: Vec<String> = Vec::new();
    for row in r.metrics.iter().flat_map(|m| &m.rows) {
        let name = series_name(&r.params, x_param, &row.labels);
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// The colour of the cell with `labels`, the same in every chart of the report: its
/// series' where there are several series, else (one line across the x axis, a cell
/// per tick) its place on the x axis.
pub fn cell_colour(r: &StudyReport, labels: &[String]) -> usize {
    let x_param = x_axis(&r.params);
    let series = report_series(r);
    if series.len() > 1 {
        let name = series_name(&r.params, x_param, labels);
        return series.iter().position(|s| *s == name).unwrap_or(0);
    }
    match x_param {
        Some(i) => r.params[i]
            .labels
            .iter()
            .position(|l| Some(l) == labels.get(i))
            .unwrap_or(0),
        None => 0,
    }
}

/// Where a sweep's values sit on a numeric x axis: the values themselves, or their
/// base-10 logarithms when the largest is 20 times the smallest or more (`true`); `None` when a value
/// is not a number (ratios, names), and the axis stays one of categories.
fn numeric_axis(labels: &[String]) -> Option<(Vec<f64>, bool)> {
    let values: Vec<f64> = labels
        .iter()
        .map(|l| l.parse::<f64>().ok().filter(|v| v.is_finite()))
        .collect::<Option<_>>()?;
    if values.len() < 2 {
        return None;
    }
    let (lo, hi) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    if lo > 0.0 && hi / lo >= 20.0 {
        Some((values.iter().map(|v| v.log10()).collect(), true))
    } else {
        Some((values, false))
    }
}

/// The chart of metric `m` of report `r`; a fetch's transfer time from several servers
/// gets each series' ideal as a dashed line in the series' colour. Each cell keeps one
/// colour across the report's charts (`cell_colour`); a numeric sweep (message
/// lengths) is drawn on a numeric axis, a logarithmic one over decades.
pub fn metric_panel(r: &StudyReport, m: &MetricTable) -> Panel {
    let x_param = x_axis(&r.params);
    let ticks: Vec<String> = match x_param {
        Some(i) => r.params[i].labels.clone(),
        None => vec!["(one cell)".into()],
    };
    let numeric = x_param.and_then(|_| numeric_axis(&ticks));
    let others = |labels: &[String]| series_name(&r.params, x_param, labels);
    // When most ticks are numbers or ratios (`1:5`), the others (`adaptive`) stand apart.
    let on_scale = |t: &str| {
        t.parse::<f64>().is_ok()
            || t.split_once(':')
                .is_some_and(|(a, b)| a.parse::<f64>().is_ok() && b.parse::<f64>().is_ok())
    };
    let scaled: Vec<bool> = ticks.iter().map(|t| on_scale(t)).collect();
    let apart = |i: usize| {
        scaled.iter().filter(|&&s| s).count() >= 2 && !scaled.get(i).copied().unwrap_or(true)
    };
    let mut names: Vec<String> = Vec::new();
    for row in &m.rows {
        let name = others(&row.labels);
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let all_series = report_series(r);
    let one_line = all_series.len() <= 1;
    let (div, unit) = metric_unit(m);
    // Where each tick sits, and the width a category (or the narrowest gap) takes.
    let positions: Vec<f64> = match &numeric {
        Some((at, _)) => at.clone(),
        None => (0..ticks.len()).map(|i| i as f64).collect(),
    };
    let width = if numeric.is_some() {
        let mut sorted = positions.clone();
        sorted.sort_by(f64::total_cmp);
        sorted
            .windows(2)
            .map(|w| w[1] - w[0])
            .filter(|g| *g > 0.0)
            .fold(f64::INFINITY, f64::min)
    } else {
        1.0
    };
    let width = if width.is_finite() { width } else { 1.0 };
    // Series side by side within a category, so that their bars do not overlap.
    let step = if names.len() > 1 {
        (0.5 / (names.len() - 1) as f64).min(0.12) * width
    } else {
        0.0
    };
    let mut series = Vec::new();
    let mut ideals = Vec::new();
    let mut bars = Vec::new();
    let mut dots = Vec::new();
    for (k, name) in names.iter().enumerate() {
        let offset = (k as f64 - (names.len() - 1) as f64 / 2.0) * step;
        let colour = all_series.iter().position(|s| s == name).unwrap_or(k);
        let mut points = Vec::new();
        let mut ideal = Vec::new();
        let mut errors = Vec::new();
        for row in m.rows.iter().filter(|row| &others(&row.labels) == name) {
            let tick = match x_param {
                Some(i) => ticks.iter().position(|t| *t == row.labels[i]).unwrap_or(0),
                None => 0,
            };
            let x = positions.get(tick).copied().unwrap_or(0.0) + offset;
            let y = row.summary.mean / div;
            points.push((tick, x, y));
            if let Some(v) = row.ideal {
                ideal.push((tick, x, v / div));
            }
            if let Some((lo, hi)) = row.summary.ci {
                errors.push((tick, x, lo / div, hi / div));
            }
        }
        // A category apart from the others (adaptive among ratios) is not joined to them:
        // a NaN point breaks the line before and after it.
        let join = |mut points: Vec<(usize, f64, f64)>| {
            points.sort_by(|a, b| a.1.total_cmp(&b.1));
            let mut joined: Vec<(f64, f64)> = Vec::with_capacity(points.len());
            let mut last: Option<usize> = None;
            for (tick, x, y) in points {
                if let (Some(l), Some(&(lx, _))) = (last, joined.last()) {
                    if apart(l) || apart(tick) {
                        joined.push(((lx + x) / 2.0, f64::NAN));
                    }
                }
                joined.push((x, y));
                last = Some(tick);
            }
            joined
        };
        let label = if name.is_empty() {
            "mean".to_string()
        } else {
            name.clone()
        };
        if !ideal.is_empty() {
            ideals.push(Series {
                colour: Some(if one_line {
                    crate::series::GREY
                } else {
                    colour
                }),
                name: format!("ideal, {label}"),
                points: join(ideal),
            });
        }
        if one_line {
            // One line across the cells: each cell's mean and interval in its own colour,
            // the line joining them grey.
            for &(tick, x, y) in &points {
                dots.push(Series {
                    colour: Some(tick),
                    name: ticks.get(tick).cloned().unwrap_or_default(),
                    points: vec![(x, y)],
                });
            }
            for &(tick, x, lo, hi) in &errors {
                bars.push(Band {
                    colour: Some(tick),
                    name: format!("{}% CI", r.confidence_percent),
                    points: vec![(x, lo, hi)],
                });
            }
        } else {
            bars.push(Band {
                colour: Some(colour),
                name: format!("{}% CI", r.confidence_percent),
                points: errors.iter().map(|&(_, x, lo, hi)| (x, lo, hi)).collect(),
            });
        }
        series.push(Series {
            colour: Some(if one_line {
                crate::series::GREY
            } else {
                colour
            }),
            name: label,
            points: join(points),
        });
    }
    Panel {
        title: title(m, &unit),
        x_label: match (x_param, &numeric) {
            (Some(i), Some((_, true))) => format!("{} (log scale)", r.params[i].name),
            (Some(i), _) => r.params[i].name.clone(),
            (None, _) => String::new(),
        },
        y_label: quantity(&m.metric, &unit),
        series,
        bands: Vec::new(),
        markers: Vec::new(),
        error_bars: bars,
        dots,
        dashed: ideals,
        x_ticks: if numeric.is_some() { Vec::new() } else { ticks },
        x_log: numeric.is_some_and(|(_, log)| log),
    }
}

/// The one-standard-deviation ellipse of `points` (their 2-D Gaussian's contour), as a
/// closed outline; empty for fewer than two points.
pub fn spread_ellipse(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return Vec::new();
    }
    let (mx, my) = points
        .iter()
        .fold((0.0, 0.0), |(x, y), p| (x + p.0 / n, y + p.1 / n));
    let (mut a, mut b, mut c) = (0.0, 0.0, 0.0);
    for &(x, y) in points {
        a += (x - mx).powi(2) / (n - 1.0);
        b += (x - mx) * (y - my) / (n - 1.0);
        c += (y - my).powi(2) / (n - 1.0);
    }
    // Eigenvalues and the major axis' angle of [[a, b], [b, c]].
    let half = (a + c) / 2.0;
    let root = (((a - c) / 2.0).powi(2) + b * b).sqrt();
    let (l1, l2) = ((half + root).max(0.0).sqrt(), (half - root).max(0.0).sqrt());
    let theta = 0.5 * (2.0 * b).atan2(a - c);
    let (sin, cos) = theta.sin_cos();
    (0..=64)
        .map(|i| {
            let t = i as f64 / 64.0 * std::f64::consts::TAU;
            let (u, v) = (l1 * t.cos(), l2 * t.sin());
            (mx + u * cos - v * sin, my + u * sin + v * cos)
        })
        .collect()
}

/// Throughput against delay: each cell's trials as dots in its colour (the colour the
/// report's other charts give it), its spread as an ellipse.
pub fn scatter_panel(r: &StudyReport, sc: &flowlab_results::study_report::Scatter) -> Panel {
    let mbit = |p: &(f64, f64)| (p.0, p.1 / 1e6);
    let colour = |cell: &str| {
        r.metrics
            .iter()
            .flat_map(|m| &m.rows)
            .find(|row| row.cell == cell)
            .map(|row| cell_colour(r, &row.labels))
    };
    Panel {
        title: "Throughput against delay (one dot per trial, ellipse: 1 sd)".into(),
        x_label: format!("{} of step {} (ms)", sc.delay.0, sc.delay.1),
        y_label: format!("throughput of step {} (Mbit/s)", sc.throughput.1),
        series: sc
            .cells
            .iter()
            .map(|c| Series {
                colour: colour(&c.cell),
                name: c.cell.clone(),
                points: spread_ellipse(&c.points.iter().map(mbit).collect::<Vec<_>>()),
            })
            .collect(),
        bands: Vec::new(),
        markers: Vec::new(),
        error_bars: Vec::new(),
        dots: sc
            .cells
            .iter()
            .map(|c| Series {
                colour: colour(&c.cell),
                name: c.cell.clone(),
                points: c.points.iter().map(mbit).collect(),
            })
            .collect(),
        dashed: Vec::new(),
        x_ticks: Vec::new(),
        x_log: false,
    }
}

#[cfg(test)]
mod tests {
    use super::{cell_colour, metric_panel, spread_ellipse};
    use flowlab_results::metrics::Metric;
    use flowlab_results::study_report::{Axis, ReportInput, TrialData, build};

    /// Seed 000's shape: transfer time against the ratio, adaptive among the ratios. The
    /// ratios are joined; adaptive stands apart (a NaN breaks the line before it).
    #[test]
    fn a_value_off_the_ratios_scale_is_not_joined_to_them() {
        let ratios = ["1:2", "1:1", "2:1", "adaptive"];
        let trials = ratios
            .iter()
            .enumerate()
            .map(|(i, r)| TrialData {
                cell: format!("ratio={r}"),
                labels: vec![r.to_string()],
                repetition: 1,
                status: flowlab_results::study::Outcome::Ok,
                error: None,
                metrics: vec![(
                    "fetch".into(),
                    Metric {
                        name: "transfer_s".into(),
                        value: 30.0 + i as f64,
                    },
                )],
            })
            .collect();
        let r = build(&ReportInput {
            study: "s".into(),
            description: String::new(),
            order: "random".into(),
            seed: 0,
            repeat: 1,
            params: vec![Axis {
                name: "ratio".into(),
                labels: ratios.iter().map(|r| r.to_string()).collect(),
            }],
            cells: ratios.iter().map(|r| format!("ratio={r}")).collect(),
            trials,
            machines: Vec::new(),
            groups: vec![("fetch".into(), None)],
            attempts: Vec::new(),
        });
        let panel = metric_panel(&r, &r.metrics[0]);
        let ys: Vec<f64> = panel.series[0].points.iter().map(|p| p.1).collect();
        assert_eq!(ys.len(), 5, "{ys:?}");
        assert_eq!(&ys[..3], [30.0, 31.0, 32.0]);
        assert!(ys[3].is_nan(), "a break before adaptive: {ys:?}");
        assert_eq!(ys[4], 33.0);
        // All on one scale: no break.
        let mut r = r;
        r.params[0].labels[3] = "3:1".into();
        let panel = metric_panel(&r, &r.metrics[0]);
        assert!(panel.series[0].points.iter().all(|p| !p.1.is_nan()));
    }

    /// A fetch from two servers: each series (distance) gets its ideal as a dashed line,
    /// broken before adaptive like the measured one, named once in the legend.
    #[test]
    fn a_fetch_from_two_servers_draws_each_series_ideal_dashed() {
        let ratios = ["1:1", "2:1", "adaptive"];
        let mut trials = Vec::new();
        let mut cells = Vec::new();
        for d in ["near", "far"] {
            for r in ratios {
                let cell = format!("distance={d} ratio={r}");
                cells.push(cell.clone());
                let (b1, b2) = if r == "2:1" { (8e8, 4e8) } else { (6e8, 6e8) };
                let rate2 = if d == "near" { 100e6 } else { 50e6 };
                let m = |name: &str, value: f64| {
                    (
                        "fetch".to_string(),
                        Metric {
                            name: name.into(),
                            value,
                        },
                    )
                };
                trials.push(TrialData {
                    cell,
                    labels: vec![d.into(), r.into()],
                    repetition: 1,
                    status: flowlab_results::study::Outcome::Ok,
                    error: None,
                    metrics: vec![
                        m("transfer_s", (b1 * 8.0 / 100e6f64).max(b2 * 8.0 / rate2)),
                        m("server1_bytes", b1),
                        m("server1_busy_s", b1 * 8.0 / 100e6),
                        m("server2_bytes", b2),
                        m("server2_busy_s", b2 * 8.0 / rate2),
                    ],
                });
            }
        }
        let r = build(&ReportInput {
            study: "s".into(),
            description: String::new(),
            order: "random".into(),
            seed: 0,
            repeat: 1,
            params: vec![
                Axis {
                    name: "distance".into(),
                    labels: vec!["near".into(), "far".into()],
                },
                Axis {
                    name: "ratio".into(),
                    labels: ratios.iter().map(|r| r.to_string()).collect(),
                },
            ],
            cells,
            trials,
            machines: Vec::new(),
            groups: vec![("fetch".into(), None)],
            attempts: Vec::new(),
        });
        let panel = metric_panel(&r, &r.metrics[0]);
        let names: Vec<&str> = panel.dashed.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["ideal, distance=near", "ideal, distance=far"]);
        // Near, at capacity: 1:1 48 s, 2:1 64 s, a break, adaptive 48 s.
        let ys: Vec<f64> = panel.dashed[0].points.iter().map(|p| p.1).collect();
        assert_eq!(ys.len(), 4, "{ys:?}");
        assert_eq!(&ys[..2], [48.0, 64.0]);
        assert!(ys[2].is_nan());
        assert_eq!(ys[3], 48.0);
        let svg = crate::render_svg(&[panel]).expect("svg");
        assert_eq!(svg.matches("ideal (dashed)").count(), 1);
        // Busy seconds have no ideal.
        let busy = r.metrics.iter().find(|m| m.metric == "server1_busy_s");
        assert!(metric_panel(&r, busy.expect("busy")).dashed.is_empty());
    }

    /// A report of one parameter `name` over `values`, `metric` in each cell but the
    /// ones `missing`.
    fn one_param_report(
        name: &str,
        values: &[&str],
        metrics: &[&str],
        missing: &[(&str, &str)],
    ) -> flowlab_results::study_report::StudyReport {
        let mut trials = Vec::new();
        for (i, v) in values.iter().enumerate() {
            for rep in 1..=3 {
                trials.push(TrialData {
                    cell: format!("{name}={v}"),
                    labels: vec![v.to_string()],
                    repetition: rep,
                    status: flowlab_results::study::Outcome::Ok,
                    error: None,
                    metrics: metrics
                        .iter()
                        .filter(|m| !missing.contains(&(**m, *v)))
                        .map(|m| {
                            (
                                "test".to_string(),
                                Metric {
                                    name: m.to_string(),
                                    value: (i as f64 + f64::from(rep)) * 1e-6,
                                },
                            )
                        })
                        .collect(),
                });
            }
        }
        build(&ReportInput {
            study: "s".into(),
            description: String::new(),
            order: "random".into(),
            seed: 0,
            repeat: 3,
            params: vec![Axis {
                name: name.into(),
                labels: values.iter().map(|v| v.to_string()).collect(),
            }],
            cells: values.iter().map(|v| format!("{name}={v}")).collect(),
            trials,
            machines: Vec::new(),
            groups: vec![("test".into(), None)],
            attempts: Vec::new(),
        })
    }

    /// A cell keeps its colour from chart to chart, even where a chart lacks another
    /// cell; its mean and interval are drawn in it, the line joining the cells grey.
    #[test]
    fn a_cell_has_one_colour_in_every_chart() {
        let r = one_param_report(
            "cc",
            &["cubic", "bbr", "reno"],
            &["jitter_ms", "loss_percent"],
            &[("loss_percent", "cubic")],
        );
        let colours = |metric: &str| -> Vec<(String, Option<usize>)> {
            let m = r.metrics.iter().find(|m| m.metric == metric).expect(metric);
            let p = metric_panel(&r, m);
            assert_eq!(p.series[0].colour, Some(crate::series::GREY));
            p.dots.iter().map(|d| (d.name.clone(), d.colour)).collect()
        };
        let jitter = colours("jitter_ms");
        let loss = colours("loss_percent");
        assert_eq!(jitter.len(), 3);
        assert_eq!(loss.len(), 2, "{loss:?}");
        for (cell, colour) in &loss {
            assert!(
                jitter.contains(&(cell.clone(), *colour)),
                "{cell}: {loss:?} {jitter:?}"
            );
        }
        assert_eq!(cell_colour(&r, &["bbr".to_string()]), 1);
    }

    /// Jitter in µs, the heading in words; a numeric sweep over decades on a log axis,
    /// one that is not on categories.
    #[test]
    fn a_numeric_sweep_is_drawn_on_a_numeric_axis_in_readable_units() {
        let r = one_param_report("len", &["100", "1000", "65000"], &["jitter_ms"], &[]);
        let p = metric_panel(&r, &r.metrics[0]);
        assert!(p.x_ticks.is_empty() && p.x_log, "{p:?}");
        assert_eq!(p.x_label, "len (log scale)");
        assert_eq!(p.y_label, "Jitter (ns)");
        let xs: Vec<f64> = p.series[0].points.iter().map(|p| p.0).collect();
        assert_eq!(xs, [2.0, 3.0, 65000f64.log10()]);
        let r = one_param_report("len", &["100", "200", "400"], &["jitter_ms"], &[]);
        let p = metric_panel(&r, &r.metrics[0]);
        assert!(p.x_ticks.is_empty() && !p.x_log, "{p:?}");
        let xs: Vec<f64> = p.series[0].points.iter().map(|p| p.0).collect();
        assert_eq!(xs, [100.0, 200.0, 400.0]);
        assert!(
            p.title.starts_with("Jitter (ns) — step test"),
            "{}",
            p.title
        );
    }

    /// Points spread 2 along x and 1 along y around (10, 5): the ellipse reaches
    /// x = 10 ± sd_x and y = 5 ± sd_y, and is centred on the mean.
    #[test]
    fn the_ellipse_spans_one_standard_deviation() {
        let pts = [(8.0, 5.0), (12.0, 5.0), (10.0, 4.0), (10.0, 6.0)];
        let e = spread_ellipse(&pts);
        let max_x = e.iter().map(|p| p.0).fold(f64::MIN, f64::max);
        let min_y = e.iter().map(|p| p.1).fold(f64::MAX, f64::min);
        // sd_x = √(8/3), sd_y = √(2/3).
        assert!(
            (max_x - (10.0 + (8.0f64 / 3.0).sqrt())).abs() < 1e-9,
            "{max_x}"
        );
        assert!(
            (min_y - (5.0 - (2.0f64 / 3.0).sqrt())).abs() < 1e-2,
            "{min_y}"
        );
        assert!(spread_ellipse(&pts[..1]).is_empty());
    }
}
