//! The Grafana dashboard shipped in deploy/grafana/ asks only for what flowlab serves:
//! every metric its queries name is a series `flowlab monitor --metrics` or `flowlab
//! serve --metrics` writes, and every label its legends show is one of that series'.

use std::collections::{BTreeMap, BTreeSet};

use flowlab_monitor::path::PathMetrics;
use flowlab_monitor::server::ServerMetrics;
use flowlab_results::monitor::{PathKind, PathLatency, PathRun, PathThroughput};
use flowlab_results::ping::Latency;

/// A run of `kind` from h1 to h2, measured or failed.
fn run(kind: PathKind, ok: bool) -> PathRun {
    let latency = (kind == PathKind::Latency && ok).then(|| PathLatency {
        sent: 20,
        received: 20,
        loss_percent: 0.0,
        rtt: Some(Latency {
            samples: 20,
            min_ms: 1.0,
            mean_ms: 1.0,
            median_ms: 1.0,
            p90_ms: 1.0,
            p99_ms: 1.0,
            p999_ms: 1.0,
            max_ms: 1.0,
            stdev_ms: 0.0,
        }),
        jitter_ms: Some(0.1),
        rtts_ms: vec![1.0; 20],
    });
    let throughput = (kind == PathKind::Throughput && ok).then(|| PathThroughput {
        sent_bytes: 1,
        sent_seconds: 1.0,
        received_bytes: 1,
        received_seconds: 1.0,
        bits_per_second: 8.0,
        retransmits: Some(0),
        congestion: Some("cubic".into()),
    });
    PathRun {
        mesh: "lab".into(),
        probe: 0,
        kind,
        source: "h1".into(),
        target: "h2".into(),
        direction: "forward".into(),
        round: 0,
        started_unix: 0.0,
        ended_unix: 1.0,
        late_seconds: 0.0,
        error: (!ok).then(|| "refused".into()),
        latency,
        throughput,
        command: String::new(),
    }
}

/// Every series name in Prometheus text `text`, with the label names it carries.
fn series(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut all: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = all.entry(line[..end].to_string()).or_default();
        if let Some(inside) = line[end..]
            .strip_prefix('{')
            .and_then(|r| r.split_once('}'))
        {
            for pair in inside.0.split("\",") {
                if let Some((name, _)) = pair.split_once('=') {
                    labels.insert(name.to_string());
                }
            }
        }
    }
    all
}

/// The `flowlab_…` names in a query.
fn names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("flowlab_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

/// Every (query, legend) of the dashboard's panels, and its variables' queries.
fn queries(v: &serde_json::Value, out: &mut Vec<(String, String)>) {
    match v {
        serde_json::Value::Object(map) => {
            if let Some(expr) = map.get("expr").and_then(|e| e.as_str()) {
                let legend = map
                    .get("legendFormat")
                    .and_then(|l| l.as_str())
                    .unwrap_or("");
                out.push((expr.to_string(), legend.to_string()));
            }
            if let Some(def) = map.get("definition").and_then(|e| e.as_str()) {
                out.push((def.to_string(), String::new()));
            }
            map.values().for_each(|v| queries(v, out));
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| queries(v, out)),
        _ => {}
    }
}

#[test]
fn the_dashboards_queries_name_only_what_flowlab_serves() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/grafana/flowlab-mesh.json");
    let text = std::fs::read_to_string(&path).expect("the shipped dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(dashboard["uid"], "flowlab-mesh");

    let mesh = PathMetrics::new().expect("path metrics");
    for kind in [PathKind::Latency, PathKind::Throughput] {
        mesh.observe(&run(kind, true));
        mesh.observe(&run(kind, false));
    }
    let server = ServerMetrics::new().expect("server metrics");
    let mut served = series(&mesh.encode());
    served.extend(series(&server.encode()));

    let mut found = Vec::new();
    queries(&dashboard, &mut found);
    assert!(found.len() >= 15, "{} queries", found.len());
    let mut checked = BTreeSet::new();
    for (expr, legend) in &found {
        let named = names(expr);
        assert!(
            !named.is_empty(),
            "a query of nothing flowlab serves: {expr}"
        );
        for name in &named {
            let labels = served
                .get(name)
                .unwrap_or_else(|| panic!("{name} (in `{expr}`) is not served"));
            checked.insert(name.clone());
            // `instance` is Prometheus's own, added when it scrapes.
            for shown in legend
                .split("{{")
                .skip(1)
                .filter_map(|s| s.split_once("}}"))
            {
                assert!(
                    shown.0 == "instance" || labels.contains(shown.0),
                    "legend `{legend}` shows {}, which {name} lacks",
                    shown.0
                );
            }
        }
    }
    // And every panel's query is PromQL as Prometheus parses it: promtool checks each
    // as a recording rule (the variables' `label_values` are Grafana's, not PromQL).
    let exprs: Vec<&String> = found
        .iter()
        .filter(|(e, _)| !e.starts_with("label_values"))
        .map(|(e, _)| e)
        .collect();
    if flowlab_testkit::require_tool("promtool") {
        let dir = tempfile::tempdir().expect("tmp");
        let rules = dir.path().join("dashboard.rules.yml");
        let mut yaml = String::from("groups:\n  - name: dashboard\n    rules:\n");
        for (i, e) in exprs.iter().enumerate() {
            // A JSON string is a YAML string.
            let quoted = serde_json::to_string(e).expect("quoted");
            yaml +=
                &format!("      - record: flowlab:dashboard_query_{i}\n        expr: {quoted}\n");
        }
        std::fs::write(&rules, yaml).expect("rules");
        let out = std::process::Command::new("promtool")
            .args(["check", "rules"])
            .arg(&rules)
            .output()
            .expect("promtool");
        assert!(
            out.status.success(),
            "promtool check rules: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Every family of the mesh's figures has a panel.
    for family in [
        "flowlab_path_throughput_bytes_per_second",
        "flowlab_path_rtt_latest_seconds",
        "flowlab_path_rtt_seconds_bucket",
        "flowlab_path_loss_ratio",
        "flowlab_path_retransmits",
        "flowlab_path_failures_total",
        "flowlab_path_up",
    ] {
        assert!(checked.contains(family), "no panel shows {family}");
    }
}
