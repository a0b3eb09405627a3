//! `flowlab report DB`: a study's results summarised per cell with confidence intervals,
//! as markdown, CSV, JSON or one self-contained HTML page; or two cells compared.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args as ClapArgs, ValueEnum};
use flowlab_db::Db;
use flowlab_report::{Format as _, ReportFormat, html};
use flowlab_results::study_report::{ReportInput, StudyReport, build, compare};

use crate::usage::Usage;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Markdown,
    Csv,
    Json,
    Html,
}

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The results database `flowlab run` wrote: its file, or its PostgreSQL URL.
    #[arg(value_name = "FILE|URL")]
    pub db: PathBuf,
    /// The study to report (needed when the database holds several).
    #[arg(long, value_name = "NAME")]
    pub study: Option<String>,
    /// Write to FILE; its extension (.html, .md, .csv, .json) gives the format unless
    /// --format does.
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// The format [default: by --out's extension, else markdown].
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Compare two cells (labels as the report writes them, e.g. "cc=cubic"): each
    /// metric's difference, its 95 % confidence interval and Welch's p-value.
    #[arg(long, num_args = 2, value_names = ["CELL_A", "CELL_B"])]
    pub compare: Option<Vec<String>>,
}

impl Args {
    fn format(&self) -> Result<Format, Usage> {
        if let Some(f) = self.format {
            return Ok(f);
        }
        let Some(out) = &self.out else {
            return Ok(Format::Markdown);
        };
        match out.extension().and_then(|e| e.to_str()) {
            Some("html" | "htm") => Ok(Format::Html),
            Some("md" | "markdown") => Ok(Format::Markdown),
            Some("csv") => Ok(Format::Csv),
            Some("json") => Ok(Format::Json),
            _ => Err(Usage(format!(
                "--out {}: give a name ending in .html, .md, .csv or .json, or say --format",
                out.display()
            ))),
        }
    }
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    let format = a.format()?;
    let db = Db::open_existing(&a.db)?;
    let input = flowlab_db::report::input(&db, a.study.as_deref()).map_err(|e| match e {
        flowlab_db::report::InputError::Ambiguous(_) => anyhow::Error::from(Usage(e.to_string())),
        e => e.into(),
    })?;
    let report = build(&input);
    let text = match &a.compare {
        Some(cells) => {
            for c in cells {
                if !input.cells.contains(c) {
                    return Err(Usage(format!(
                        "--compare: '{c}' is not a cell of study {} (its cells: {})",
                        input.study,
                        input.cells.join("; ")
                    ))
                    .into());
                }
            }
            let c = compare(&report, &cells[0], &cells[1]);
            match format {
                Format::Json => ReportFormat::Json.write(&c)?,
                Format::Markdown => ReportFormat::Markdown.write(&c)?,
                Format::Csv | Format::Html => {
                    return Err(
                        Usage("--compare writes markdown or JSON (--format json)".into()).into(),
                    );
                }
            }
        }
        None => match format {
            Format::Markdown => ReportFormat::Markdown.write(&report)?,
            Format::Csv => ReportFormat::Csv.write(&report)?,
            Format::Json => ReportFormat::Json.write(&report)?,
            Format::Html => html_page(&db, &input, &report)?,
        },
    };
    match &a.out {
        Some(path) => {
            std::fs::write(path, text)
                .with_context(|| format!("cannot write {}", path.display()))?;
            // As `plot` says it: on stderr, stdout staying for what is asked for.
            let what = match (&a.compare, format) {
                (Some(cells), _) => format!("{} against {}", cells[0], cells[1]),
                (None, Format::Html) => "the HTML report".into(),
                (None, Format::Markdown) => "the markdown report".into(),
                (None, Format::Csv) => "the CSV report".into(),
                (None, Format::Json) => "the JSON report".into(),
            };
            eprintln!("wrote {} ({what} of study {})", path.display(), input.study);
        }
        None => super::emit(&text),
    }
    Ok(())
}

/// The report as one self-contained HTML page: its tables, a chart per metric (and the
/// scatter, when the study has one), each cell's first traced trial drawn.
pub(crate) fn html_page(
    db: &Db,
    input: &ReportInput,
    report: &StudyReport,
) -> anyhow::Result<String> {
    let mut charts = report
        .metrics
        .iter()
        .map(|m| flowlab_plot::render_svg(&[flowlab_plot::metric_panel(report, m)]).ok())
        .collect::<Vec<_>>();
    if let Some(sc) = &report.scatter {
        charts.push(flowlab_plot::render_svg(&[flowlab_plot::scatter_panel(report, sc)]).ok());
    }
    let traces = traces(db, input)?;
    let page = html::Page {
        charts: &charts,
        traces: &traces,
    };
    Ok(page.write(report)?)
}

/// The HTML report of study `study` in the database at `db`, as it holds it now.
pub(crate) fn html_now(db: &std::path::Path, study: &str) -> anyhow::Result<String> {
    let db = Db::open_existing(db)?;
    let input = flowlab_db::report::input(&db, Some(study))?;
    html_page(&db, &input, &build(&input))
}

/// Each cell's first traced trial (a test step run with `--trace`), drawn as its window
/// and RTT graphs: (heading, SVG document).
fn traces(db: &Db, input: &ReportInput) -> anyhow::Result<Vec<(String, String)>> {
    use flowlab_plot::{Graph, Input};
    let Some(study) = db.find_study(&input.study)? else {
        return Ok(Vec::new());
    };
    let trials = db.trials(study.id)?;
    let mut out = Vec::new();
    for cell in &input.cells {
        let traced = trials
            .iter()
            .filter(|t| &t.cell == cell && t.status == flowlab_results::study::Outcome::Ok)
            .flat_map(|t| t.steps.iter().map(move |s| (t, s)))
            .filter(|(_, s)| s.kind == "test")
            .find_map(|(t, s)| {
                let r: flowlab_results::result::TestResult =
                    serde_json::from_str(s.result.as_deref()?).ok()?;
                r.trace.is_some().then_some((t, s, r))
            });
        let Some((t, step, result)) = traced else {
            continue;
        };
        let inputs = [Input {
            name: step.name.clone(),
            from: format!("step {} of cell {cell}", step.name),
            result,
        }];
        let mut panels = Vec::new();
        for g in [Graph::Window, Graph::Rtt] {
            panels.extend(flowlab_plot::panels(g, &inputs)?);
        }
        let heading = format!(
            "{}, step {}, repetition {}",
            if cell.is_empty() { "(one cell)" } else { cell },
            step.name,
            t.repetition
        );
        out.push((heading, flowlab_plot::render_svg(&panels)?));
    }
    Ok(out)
}
