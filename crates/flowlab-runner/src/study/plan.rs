//! The plan `--dry-run` prints: the cells with each step's command, the trials in their
//! order, and an estimate of the time.

use std::time::Duration;

use flowlab_results::study::{CellPlan, PlanSummary};
use flowlab_study::file::Order;
use flowlab_study::{Cell, Study};

use super::prepare::Prepared;

impl Prepared {
    /// The plan, as a dry run shows it.
    pub fn plan(&self) -> PlanSummary {
        summary(self)
    }
}

/// `p`'s plan.
fn summary(p: &Prepared) -> PlanSummary {
    let scale = p.scale;
    let (study, plan, lines, trials, pause) = (&p.study, &p.plan, &p.lines, &p.trials, p.pause);
    let serve_lines = &p.serve_lines;
    let stages = study.stages();
    // A trial takes its stages one after another, a stage as long as its longest step.
    let trial_time = |cell: usize| -> (Duration, bool) {
        let mut floor = false;
        let total = stages
            .iter()
            .map(|stage| {
                stage
                    .iter()
                    .map(|&i| {
                        let e = lines[cell][i].expected;
                        floor |= e.is_none();
                        e.unwrap_or_default()
                    })
                    .max()
                    .unwrap_or_default()
            })
            .sum();
        (total, floor)
    };
    let mut estimate = Duration::ZERO;
    let mut floor = false;
    for t in trials.iter().chain(std::iter::repeat_n(
        &trials[0],
        if trials.is_empty() {
            0
        } else {
            study.warmup as usize
        },
    )) {
        let (d, f) = trial_time(t.cell);
        estimate += d;
        floor |= f;
    }
    estimate += pause * trials.len().saturating_sub(1) as u32;
    PlanSummary {
        study: study.name.clone(),
        description: study.description.clone(),
        order: match study.order {
            Order::Random => "random",
            Order::Sequential => "sequential",
        }
        .into(),
        seed: plan.seed,
        repeat: study.repeat,
        warmup: study.warmup,
        scale,
        setup: p
            .setup_lines
            .iter()
            .map(|a| {
                if p.remotes.is_empty() {
                    return a.join(" ");
                }
                let at: Vec<&str> = super::execute::used(p)
                    .into_iter()
                    .map(|n| n.unwrap_or("this machine"))
                    .collect();
                format!("{}  (at {})", a.join(" "), at.join(", "))
            })
            .collect(),
        servers: study
            .servers
            .iter()
            .zip(serve_lines)
            .map(|(s, argv)| {
                (
                    s.name.clone(),
                    format!(
                        "{} on {}",
                        argv[1..].join(" "),
                        match (
                            &s.node,
                            p.remotes.iter().find(|(n, _)| Some(n) == s.node.as_ref())
                        ) {
                            (Some(node), Some((_, r))) => format!(
                                "{node} ({}{} over SSH)",
                                r.target.destination,
                                r.target
                                    .port
                                    .map(|p| format!(" port {p}"))
                                    .unwrap_or_default()
                            ),
                            (Some(node), None) => node.clone(),
                            (None, _) => "this machine's loopback".into(),
                        }
                    ),
                )
            })
            .collect(),
        cells: plan
            .cells
            .iter()
            .enumerate()
            .map(|(c, cell)| CellPlan {
                label: study.cell_label(cell),
                links: link_lines(study, cell),
                steps: study
                    .steps
                    .iter()
                    .zip(&lines[c])
                    .enumerate()
                    .map(|(i, (s, l))| {
                        format!(
                            "{}{}: {}{}",
                            s.name,
                            s.group
                                .as_deref()
                                .map(|g| format!(" (group {g})"))
                                .unwrap_or_default(),
                            if l.echoes.is_some() {
                                format!("ICMP echoes to {}", l.argv[1..].join(" "))
                            } else {
                                format!("flowlab {}", l.argv.join(" "))
                            },
                            names(p, i, &l.argv)
                        )
                    })
                    .collect(),
            })
            .collect(),
        planned: plan.trials.len(),
        trials: trials.len(),
        first: trials
            .iter()
            .take(5)
            .map(|t| (study.cell_label(&plan.cells[t.cell]), t.repetition))
            .collect(),
        estimated_seconds: estimate.as_secs_f64(),
        estimate_is_floor: floor,
    }
}

/// Where step `i` runs and the nodes behind the addresses in its command `argv`, as the
/// plan shows them beside it: `  (from h1; 10.0.2.1 is h4)`; nothing off a topology.
fn names(p: &Prepared, i: usize, argv: &[String]) -> String {
    let study = &p.study;
    let mut said: Vec<String> = study.steps[i]
        .from
        .iter()
        .map(|from| format!("from {from}"))
        .collect();
    for (s, server) in study.servers.iter().enumerate() {
        let Some(node) = &server.node else { continue };
        let address = p.host(i, s);
        let named = format!("{address} is {node}");
        let used = argv
            .iter()
            .any(|a| *a == address || a.strip_prefix(&address).is_some_and(|r| r.starts_with(':')));
        if used && !address.is_empty() && !said.contains(&named) {
            said.push(named);
        }
    }
    if said.is_empty() {
        String::new()
    } else {
        format!("  ({})", said.join("; "))
    }
}

/// `cell`'s link values, a line per link: `client: rate 301M, delay 1ms`.
fn link_lines(study: &Study, cell: &Cell) -> Vec<String> {
    let mut lines: Vec<(String, Vec<String>)> = Vec::new();
    for (link, key, value) in study.link_values(cell) {
        let set = format!("{key} {value}");
        match lines.last_mut() {
            Some((l, sets)) if *l == link => sets.push(set),
            _ => lines.push((link, vec![set])),
        }
    }
    lines
        .into_iter()
        .map(|(link, sets)| format!("{link}: {}", sets.join(", ")))
        .collect()
}
