//! A study's report as CSV: one row per metric and cell, a column per parameter.

use flowlab_results::study_report::StudyReport;

/// The report as CSV: one row per metric and cell, a column per parameter.
pub fn csv(r: &StudyReport) -> Result<String, ::csv::Error> {
    let mut w = ::csv::Writer::from_writer(Vec::new());
    let mut header: Vec<String> = ["study", "step", "metric", "unit", "cell"]
        .map(String::from)
        .to_vec();
    header.extend(r.params.iter().map(|p| p.name.clone()));
    header.extend(
        [
            "n", "mean", "median", "sd", "min", "max", "ci_low", "ci_high", "ideal",
        ]
        .map(String::from),
    );
    w.write_record(&header)?;
    for m in &r.metrics {
        for row in &m.rows {
            let s = &row.summary;
            let mut rec = vec![
                r.study.clone(),
                m.step.clone(),
                m.metric.clone(),
                m.unit.clone(),
                row.cell.clone(),
            ];
            rec.extend(row.labels.iter().cloned());
            let opt = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
            rec.extend([
                s.n.to_string(),
                s.mean.to_string(),
                s.median.to_string(),
                s.sd.to_string(),
                s.min.to_string(),
                s.max.to_string(),
                opt(s.ci.map(|c| c.0)),
                opt(s.ci.map(|c| c.1)),
                opt(row.ideal),
            ]);
            w.write_record(&rec)?;
        }
    }
    let bytes = w.into_inner().map_err(|e| e.into_error())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}
