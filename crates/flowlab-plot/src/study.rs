//! A study report's charts: a metric against the swept parameter with the most values,
//! one line per combination of the other parameters, each mean with its confidence
//! interval as an error bar.

use flowlab_report::study_report::{MetricTable, StudyReport, display_unit, title};

use crate::{Band, Panel, Series};

/// The chart of metric `m` of report `r`.
pub fn metric_panel(r: &StudyReport, m: &MetricTable) -> Panel {
    // The x axis: the parameter with the most values (the first of equals).
    let x_param = (0..r.params.len())
        .rev()
        .max_by_key(|&i| r.params[i].labels.len());
    let ticks: Vec<String> = match x_param {
        Some(i) => r.params[i].labels.clone(),
        None => vec!["(one cell)".into()],
    };
    let others = |labels: &[String]| -> String {
        r.params
            .iter()
            .zip(labels)
            .enumerate()
            .filter(|(i, _)| Some(*i) != x_param)
            .map(|(_, (p, l))| format!("{}={l}", p.name))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut names: Vec<String> = Vec::new();
    for row in &m.rows {
        let name = others(&row.labels);
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let largest = m
        .rows
        .iter()
        .flat_map(|r| [r.summary.mean, r.summary.ci.map_or(0.0, |c| c.1)])
        .fold(0.0, |a: f64, v| a.max(v.abs()));
    let (div, unit) = display_unit(&m.unit, largest);
    // Series side by side within a category, so that their bars do not overlap.
    let step = if names.len() > 1 {
        (0.5 / (names.len() - 1) as f64).min(0.12)
    } else {
        0.0
    };
    let mut series = Vec::new();
    let mut bars = Vec::new();
    for (k, name) in names.iter().enumerate() {
        let offset = (k as f64 - (names.len() - 1) as f64 / 2.0) * step;
        let mut points = Vec::new();
        let mut errors = Vec::new();
        for row in m.rows.iter().filter(|row| &others(&row.labels) == name) {
            let x = match x_param {
                Some(i) => ticks.iter().position(|t| *t == row.labels[i]).unwrap_or(0),
                None => 0,
            } as f64
                + offset;
            points.push((x, row.summary.mean / div));
            if let Some((lo, hi)) = row.summary.ci {
                errors.push((x, lo / div, hi / div));
            }
        }
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        series.push(Series {
            name: if name.is_empty() {
                "mean".into()
            } else {
                name.clone()
            },
            points,
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
        x_ticks: ticks,
    }
}
