//! A study's results read back as a report's input ([`ReportInput`]): its trials with
//! their metrics, cells, machines and failed attempts.

use flowlab_proto::system::SystemInfo;
use flowlab_results::metrics::Metric;
use flowlab_results::study_report::{Axis, Failure, ReportInput, TrialData};

use crate::{Db, DbError};

/// Why a database holds no report to make.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error(transparent)]
    Db(#[from] DbError),
    /// The study asked for is not there, or none was named and several are: the
    /// caller's to say which (a usage error).
    #[error("{0}")]
    Ambiguous(String),
    #[error("{0}: no study recorded yet")]
    Empty(String),
    #[error("{path}: study {name}'s recorded file: {why}")]
    BadFile {
        path: String,
        name: String,
        why: flowlab_study::StudyError,
    },
}

/// The trials, cells and machines of study `name` in `db` (its only one when `None`).
pub fn input(db: &Db, name: Option<&str>) -> Result<ReportInput, InputError> {
    let path = db.path().display().to_string();
    let studies = db.studies()?;
    let row = match name {
        Some(n) => studies.iter().find(|s| s.name == n).ok_or_else(|| {
            InputError::Ambiguous(format!(
                "--study {n}: {path} holds no such study (it holds: {})",
                names(&studies)
            ))
        })?,
        None => match studies.as_slice() {
            [one] => one,
            [] => return Err(InputError::Empty(path)),
            _ => {
                return Err(InputError::Ambiguous(format!(
                    "{path} holds several studies ({}): say which with --study",
                    names(&studies)
                )));
            }
        },
    };
    let study = flowlab_study::parse(&row.file).map_err(|why| InputError::BadFile {
        path: path.clone(),
        name: row.name.clone(),
        why,
    })?;
    let cells: Vec<String> = study.cells().iter().map(|c| study.cell_label(c)).collect();
    let metrics = db.metrics(row.id)?;
    let trials = db
        .trials(row.id)?
        .into_iter()
        .map(|t| {
            let params: serde_json::Value = serde_json::from_str(&t.params).unwrap_or_default();
            TrialData {
                labels: study
                    .params
                    .iter()
                    .map(|p| params[&p.name].as_str().unwrap_or_default().to_string())
                    .collect(),
                metrics: metrics
                    .iter()
                    .filter(|m| m.0 == t.id)
                    .map(|(_, step, name, value)| {
                        (
                            step.clone(),
                            Metric {
                                name: name.clone(),
                                value: *value,
                            },
                        )
                    })
                    .collect(),
                cell: t.cell,
                repetition: t.repetition,
                status: t.status,
                error: t.error,
            }
        })
        .collect();
    let machines = db
        .runners(row.id)?
        .into_iter()
        .map(|(host, version, system)| machine(&host, &version, &system))
        .collect::<Vec<_>>();
    let attempts = db
        .attempts(row.id)?
        .into_iter()
        .map(|a| Failure {
            cell: a.cell,
            repetition: a.repetition,
            error: a.error.unwrap_or_default(),
        })
        .collect();
    let mut unique = Vec::new();
    for m in machines {
        if !unique.contains(&m) {
            unique.push(m);
        }
    }
    Ok(ReportInput {
        study: row.name.clone(),
        description: study.description.clone(),
        order: match study.order {
            flowlab_study::file::Order::Random => "random",
            flowlab_study::file::Order::Sequential => "sequential",
        }
        .into(),
        seed: row.seed,
        repeat: study.repeat,
        params: study
            .params
            .iter()
            .map(|p| Axis {
                name: p.name.clone(),
                labels: p.values.iter().map(|v| v.label.clone()).collect(),
            })
            .collect(),
        cells,
        trials,
        machines: unique,
        groups: study
            .steps
            .iter()
            .map(|s| (s.name.clone(), s.group.clone()))
            .collect(),
        attempts,
    })
}

fn names(studies: &[crate::StudyRow]) -> String {
    studies
        .iter()
        .map(|s| s.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// One line about the machine a runner ran on.
fn machine(host: &str, version: &str, system: &str) -> String {
    let s: SystemInfo = serde_json::from_str(system).unwrap_or_default();
    let or = |v: Option<String>| v.unwrap_or_else(|| "?".into());
    format!(
        "{host}: kernel {}, {} CPUs, default congestion control {}, flowlab {version}",
        or(s.kernel),
        or(s.cpus.map(|c| c.to_string())),
        or(s.congestion_default)
    )
}
