//! A study report's charts: a metric against the swept parameter with the most values,
//! one line per combination of the other parameters, each mean with its confidence
//! interval as an error bar; a value off the others' scale (`adaptive` among ratios)
//! drawn apart, not joined to them.

use flowlab_report::study_report::{metric_unit, title};
use flowlab_results::study_report::{MetricTable, StudyReport, series_name, x_axis};

use crate::{Band, Panel, Series};

/// The chart of metric `m` of report `r`; a fetch's transfer time from several servers
/// gets each series' ideal as a dashed line in the series' colour.
pub fn metric_panel(r: &StudyReport, m: &MetricTable) -> Panel {
    let x_param = x_axis(&r.params);
    let ticks: Vec<String> = match x_param {
        Some(i) => r.params[i].labels.clone(),
        None => vec!["(one cell)".into()],
    };
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
    let (div, unit) = metric_unit(m);
    // Series side by side within a category, so that their bars do not overlap.
    let step = if names.len() > 1 {
        (0.5 / (names.len() - 1) as f64).min(0.12)
    } else {
        0.0
    };
    let mut series = Vec::new();
    let mut ideals = Vec::new();
    let mut bars = Vec::new();
    for (k, name) in names.iter().enumerate() {
        let offset = (k as f64 - (names.len() - 1) as f64 / 2.0) * step;
        let mut points = Vec::new();
        let mut ideal = Vec::new();
        let mut errors = Vec::new();
        for row in m.rows.iter().filter(|row| &others(&row.labels) == name) {
            let x = match x_param {
                Some(i) => ticks.iter().position(|t| *t == row.labels[i]).unwrap_or(0),
                None => 0,
            } as f64
                + offset;
            points.push((x, row.summary.mean / div));
            if let Some(v) = row.ideal {
                ideal.push((x, v / div));
            }
            if let Some((lo, hi)) = row.summary.ci {
                errors.push((x, lo / div, hi / div));
            }
        }
        // A category apart from the others (adaptive among ratios) is not joined to them:
        // a NaN point breaks the line before and after it.
        let category = |x: f64| (x - offset).round() as usize;
        let join = |mut points: Vec<(f64, f64)>| {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            let mut joined: Vec<(f64, f64)> = Vec::with_capacity(points.len());
            for p in points {
                if let Some(&last) = joined.last() {
                    if apart(category(last.0)) || apart(category(p.0)) {
                        joined.push(((last.0 + p.0) / 2.0, f64::NAN));
                    }
                }
                joined.push(p);
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
                name: format!("ideal, {label}"),
                points: join(ideal),
            });
        }
        series.push(Series {
            name: label,
            points: join(points),
        });
        bars.push(Band {
            name: format!("{}% CI", r.confidence_percent),
            points: errors,
        });
    }
    Panel {
        title: title(m, &unit),
        x_label: x_param.map_or(String::new(), |i| r.params[i].name.clone()),
        y_label: if unit.is_empty() {
            m.metric.clone()
        } else {
            format!("{} ({unit})", m.metric)
        },
        series,
        bands: Vec::new(),
        markers: Vec::new(),
        error_bars: bars,
        dots: Vec::new(),
        dashed: ideals,
        x_ticks: ticks,
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

/// Throughput against delay: each cell's trials as dots in its colour, its spread as
/// an ellipse.
pub fn scatter_panel(sc: &flowlab_results::study_report::Scatter) -> Panel {
    let mbit = |p: &(f64, f64)| (p.0, p.1 / 1e6);
    Panel {
        title: "Throughput against delay (one dot per trial, ellipse: 1 sd)".into(),
        x_label: format!("{} of step {} (ms)", sc.delay.0, sc.delay.1),
        y_label: format!("throughput of step {} (Mbit/s)", sc.throughput.1),
        series: sc
            .cells
            .iter()
            .map(|c| Series {
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
                name: c.cell.clone(),
                points: c.points.iter().map(mbit).collect(),
            })
            .collect(),
        dashed: Vec::new(),
        x_ticks: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::{metric_panel, spread_ellipse};
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
