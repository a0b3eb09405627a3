//! A study's report: every metric of every step summarised per cell over the trials'
//! repetitions ([`crate::stats`]), the failed trials listed (never averaged in), and two
//! cells compared. Built from what the results database holds, handed in as plain data;
//! shown by the formats (`flowlab_report::study_report`: markdown, CSV, JSON, HTML).

use crate::study::Outcome;

use serde::Serialize;

use crate::metrics::{self, Metric};
use crate::stats::{self, Difference, Summary};

/// A swept parameter: its name and its values' labels, in the study's order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Axis {
    pub name: String,
    pub labels: Vec<String>,
}

/// One recorded trial, as the report needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialData {
    pub cell: String,
    /// The label of each parameter's value, in the study's order of parameters.
    pub labels: Vec<String>,
    pub repetition: u32,
    pub status: crate::study::Outcome,
    pub error: Option<String>,
    /// Each step's metrics: (step name, metric).
    pub metrics: Vec<(String, Metric)>,
}

/// What a report is made from.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportInput {
    pub study: String,
    pub description: String,
    pub order: String,
    pub seed: u64,
    pub repeat: u32,
    pub params: Vec<Axis>,
    /// The study's cells, in the plan's order (labels).
    pub cells: Vec<String>,
    pub trials: Vec<TrialData>,
    /// The machines the runs were made on, one line each (kernel, cores, congestion
    /// control, flowlab version).
    pub machines: Vec<String>,
    /// Each step's name and group (steps of a group run at the same time).
    pub groups: Vec<(String, Option<String>)>,
    /// Failed attempts of trials that were run again (`flowlab run --retry-failed`).
    pub attempts: Vec<Failure>,
}

/// A metric of a step, per cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricTable {
    pub step: String,
    pub metric: String,
    pub unit: String,
    pub rows: Vec<CellRow>,
    /// A fetch's transfer time from two or more servers: per series of the chart, the
    /// servers' capacities and the capacity-proportional split's time ([`Ideal`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ideals: Vec<Ideal>,
}

/// One cell's summary of a metric.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellRow {
    pub cell: String,
    pub labels: Vec<String>,
    pub summary: Summary,
    /// What the cell's split would take if every server delivered at its capacity
    /// (a fetch's transfer time from two or more servers; see [`Ideal`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ideal: Option<f64>,
}

/// The ideal of a fetch from several servers, for one series of the chart (the cells
/// that differ only in the chart's x parameter, e.g. the load ratio).
///
/// A server's capacity is its bytes over its busy seconds, summed over the series' ok
/// trials: the rate it kept while it had work. A cell's ideal is the time its split
/// (each server's mean bytes) would take at those capacities, the slowest server
/// deciding; the capacity-proportional split, each server's share its capacity's,
/// would take the mean bytes fetched over the capacities' sum. The model assumes that
/// the servers' paths do not share a bottleneck.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ideal {
    /// The series' name as the chart gives it (empty for a chart of one series).
    pub series: String,
    /// Each server's capacity, bit/s, server 1 first.
    pub capacities_bps: Vec<f64>,
    /// The capacity-proportional split's transfer time, seconds.
    pub best_s: f64,
}

/// A trial that failed, with why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    pub cell: String,
    pub repetition: u32,
    pub error: String,
}

/// A study's report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StudyReport {
    pub schema: String,
    pub study: String,
    pub description: String,
    pub order: String,
    pub seed: u64,
    pub repeat: u32,
    pub params: Vec<Axis>,
    /// Cells × repeat.
    pub planned: usize,
    pub ok: usize,
    pub failed: usize,
    /// Claimed and not finished (running now, or a runner that is gone).
    pub running: usize,
    pub machines: Vec<String>,
    /// Confidence of every interval, percent.
    pub confidence_percent: f64,
    pub metrics: Vec<MetricTable>,
    /// Throughput against delay per cell, when the trials measured both.
    pub scatter: Option<Scatter>,
    pub failures: Vec<Failure>,
    /// Failed attempts of trials that were run again: not in the statistics (the trial's
    /// last run is), listed so that no failure goes unseen.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub retried: Vec<Failure>,
}

/// Each cell's trials as (delay, throughput) points: the chart Pantheon and flent use to
/// compare congestion controls or link profiles (higher and further left is better).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scatter {
    /// The metric and step the throughput is from (`throughput_bps`, its test step).
    pub throughput: (String, String),
    /// The metric and step the delay is from: the `rtt_p95_ms` of an RTT step in the
    /// test's group (the RTT under its load), else the test's own `rtt_ms` (the median
    /// of its smoothed RTT).
    pub delay: (String, String),
    pub cells: Vec<ScatterCell>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScatterCell {
    pub cell: String,
    /// (delay in ms, throughput in bit/s), one per trial that has both.
    pub points: Vec<(f64, f64)>,
}

/// The first step with metric `name` in `trials`.
fn first_step_with(trials: &[&TrialData], name: &str) -> Option<String> {
    trials
        .iter()
        .flat_map(|t| &t.metrics)
        .find(|(_, m)| m.name == name)
        .map(|(s, _)| s.clone())
}

fn value(t: &TrialData, (name, step): (&str, &str)) -> Option<f64> {
    t.metrics
        .iter()
        .find(|(s, m)| s == step && m.name == name)
        .map(|(_, m)| m.value)
}

/// The throughput-against-delay points of `ok` trials, per cell of `cells`; `None` when
/// fewer than two cells have any.
fn scatter(
    cells: &[String],
    ok: &[&TrialData],
    groups: &[(String, Option<String>)],
) -> Option<Scatter> {
    let tput_step = first_step_with(ok, "throughput_bps")?;
    let group_of = |step: &str| {
        groups
            .iter()
            .find(|(s, _)| s == step)
            .and_then(|(_, g)| g.clone())
    };
    let beside = group_of(&tput_step).and_then(|g| {
        groups
            .iter()
            .filter(|(_, sg)| sg.as_ref() == Some(&g))
            .map(|(s, _)| s.clone())
            .find(|s| {
                ok.iter()
                    .flat_map(|t| &t.metrics)
                    .any(|(st, m)| st == s && m.name == "rtt_p95_ms")
            })
    });
    let delay = match beside {
        Some(step) => ("rtt_p95_ms".to_string(), step),
        None => ("rtt_ms".to_string(), tput_step.clone()),
    };
    let cells: Vec<ScatterCell> = cells
        .iter()
        .map(|cell| ScatterCell {
            cell: cell.clone(),
            points: ok
                .iter()
                .filter(|t| &t.cell == cell)
                .filter_map(|t| {
                    Some((
                        value(t, (&delay.0, &delay.1))?,
                        value(t, ("throughput_bps", &tput_step))?,
                    ))
                })
                .collect(),
        })
        .filter(|c| !c.points.is_empty())
        .collect();
    (cells.len() >= 2).then(|| Scatter {
        throughput: ("throughput_bps".into(), tput_step),
        delay,
        cells,
    })
}

/// The parameter a chart of the report draws along its x axis: the one with the most
/// values (the first of equals); `None` for a study without parameters.
pub fn x_axis(params: &[Axis]) -> Option<usize> {
    (0..params.len())
        .rev()
        .max_by_key(|&i| params[i].labels.len())
}

/// The series a cell with `labels` belongs to in a chart whose x parameter is `x`: its
/// other parameters' `name=label`, space-separated (empty when there are none).
pub fn series_name(params: &[Axis], x: Option<usize>, labels: &[String]) -> String {
    params
        .iter()
        .zip(labels)
        .enumerate()
        .filter(|(i, _)| Some(*i) != x)
        .map(|(_, (p, l))| format!("{}={l}", p.name))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Fills in the ideal of a fetch's `transfer_s` table from the trials' per-server
/// metrics (`serverN_bytes`, `serverN_busy_s`), per series ([`Ideal`]); nothing when
/// fewer than two servers delivered or a series' server was never busy.
fn fill_ideal(table: &mut MetricTable, params: &[Axis], ok: &[&TrialData]) {
    let step = table.step.clone();
    let of = |t: &TrialData, name: &str| value(t, (name, &step));
    let servers = (1..)
        .take_while(|n| {
            ok.iter()
                .any(|t| of(t, &format!("server{n}_bytes")).is_some())
        })
        .count();
    if table.metric != "transfer_s" || servers < 2 {
        return;
    }
    let x = x_axis(params);
    let mut names: Vec<String> = Vec::new();
    for row in &table.rows {
        let name = series_name(params, x, &row.labels);
        if !names.contains(&name) {
            names.push(name);
        }
    }
    for name in names {
        let cells: Vec<usize> = (0..table.rows.len())
            .filter(|&i| series_name(params, x, &table.rows[i].labels) == name)
            .collect();
        let trials_of = |cell: &str| -> Vec<&TrialData> {
            ok.iter().copied().filter(|t| t.cell == cell).collect()
        };
        let series: Vec<&TrialData> = cells
            .iter()
            .flat_map(|&i| trials_of(&table.rows[i].cell))
            .collect();
        let bytes = |t: &TrialData, n: usize| of(t, &format!("server{n}_bytes")).unwrap_or(0.0);
        let capacities: Vec<f64> = (1..=servers)
            .map(|n| {
                let (b, s) = series.iter().fold((0.0, 0.0), |(b, s), t| {
                    (
                        b + bytes(t, n),
                        s + of(t, &format!("server{n}_busy_s")).unwrap_or(0.0),
                    )
                });
                b * 8.0 / s
            })
            .collect();
        if series.is_empty() || capacities.iter().any(|c| !c.is_finite() || *c <= 0.0) {
            continue;
        }
        let mean_bytes = |trials: &[&TrialData], n: usize| {
            trials.iter().map(|t| bytes(t, n)).sum::<f64>() / trials.len() as f64
        };
        let total: f64 = (1..=servers).map(|n| mean_bytes(&series, n)).sum();
        table.ideals.push(Ideal {
            series: name,
            best_s: total * 8.0 / capacities.iter().sum::<f64>(),
            capacities_bps: capacities.clone(),
        });
        for i in cells {
            let trials = trials_of(&table.rows[i].cell);
            if trials.is_empty() {
                continue;
            }
            table.rows[i].ideal = Some(
                (1..=servers)
                    .map(|n| mean_bytes(&trials, n) * 8.0 / capacities[n - 1])
                    .fold(0.0, f64::max),
            );
        }
    }
}

/// Whether a metric is reported: all but byte counts (what a test was asked to move, a
/// fetch's split: in the database, not the report) and metrics that are zero in every
/// trial.
fn reported(name: &str, values: &[f64]) -> bool {
    !name.ends_with("_bytes") && values.iter().any(|&v| v != 0.0)
}

/// Summarises `input`: per step and metric (in the order they first appear), per cell
/// (in the plan's order), over the trials that ended ok.
pub fn build(input: &ReportInput) -> StudyReport {
    let ok: Vec<&TrialData> = input
        .trials
        .iter()
        .filter(|t| t.status == Outcome::Ok)
        .collect();
    let mut keys: Vec<(String, String)> = Vec::new();
    for t in &ok {
        for (step, m) in &t.metrics {
            if !keys.iter().any(|(s, n)| s == step && n == &m.name) {
                keys.push((step.clone(), m.name.clone()));
            }
        }
    }
    let mut tables = Vec::new();
    for (step, name) in keys {
        let mut rows = Vec::new();
        let mut all = Vec::new();
        for cell in &input.cells {
            let trials: Vec<&&TrialData> = ok.iter().filter(|t| &t.cell == cell).collect();
            let values: Vec<f64> = trials
                .iter()
                .flat_map(|t| &t.metrics)
                .filter(|(s, m)| s == &step && m.name == name)
                .map(|(_, m)| m.value)
                .collect();
            all.extend(&values);
            if let (Some(summary), Some(t)) = (stats::summary(&values), trials.first()) {
                let (lo, hi) = metrics::range(&name);
                rows.push(CellRow {
                    cell: cell.clone(),
                    labels: t.labels.clone(),
                    summary: summary.within(lo, hi),
                    ideal: None,
                });
            }
        }
        if reported(&name, &all) {
            let mut table = MetricTable {
                unit: metrics::unit(&name).into(),
                step,
                metric: name,
                rows,
                ideals: Vec::new(),
            };
            fill_ideal(&mut table, &input.params, &ok);
            tables.push(table);
        }
    }
    let count = |s: Outcome| input.trials.iter().filter(|t| t.status == s).count();
    StudyReport {
        schema: "flowlab.report/1".into(),
        study: input.study.clone(),
        description: input.description.clone(),
        order: input.order.clone(),
        seed: input.seed,
        repeat: input.repeat,
        params: input.params.clone(),
        planned: input.cells.len() * input.repeat as usize,
        ok: count(Outcome::Ok),
        failed: count(Outcome::Failed),
        running: count(Outcome::Running),
        machines: input.machines.clone(),
        confidence_percent: stats::CONFIDENCE * 100.0,
        metrics: tables,
        scatter: scatter(&input.cells, &ok, &input.groups),
        failures: input
            .trials
            .iter()
            .filter(|t| t.status == Outcome::Failed)
            .map(|t| Failure {
                cell: t.cell.clone(),
                repetition: t.repetition,
                error: t.error.clone().unwrap_or_default(),
            })
            .collect(),
        retried: input.attempts.clone(),
    }
}

/// Two cells compared on every metric they share.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub a: String,
    pub b: String,
    pub rows: Vec<ComparisonRow>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ComparisonRow {
    pub step: String,
    pub metric: String,
    pub unit: String,
    pub a: Summary,
    pub b: Summary,
    /// `None` when either cell has fewer than two trials.
    pub difference: Option<Difference>,
}

/// Cell `b` against cell `a` (labels as the report writes them).
pub fn compare(report: &StudyReport, a: &str, b: &str) -> Comparison {
    let rows = report
        .metrics
        .iter()
        .filter_map(|m| {
            let find = |c: &str| {
                m.rows
                    .iter()
                    .find(|r| r.cell == c)
                    .map(|r| r.summary.clone())
            };
            let (sa, sb) = (find(a)?, find(b)?);
            Some(ComparisonRow {
                step: m.step.clone(),
                metric: m.metric.clone(),
                unit: m.unit.clone(),
                difference: stats::welch(&sa, &sb),
                a: sa,
                b: sb,
            })
        })
        .collect();
    Comparison {
        a: a.into(),
        b: b.into(),
        rows,
    }
}
