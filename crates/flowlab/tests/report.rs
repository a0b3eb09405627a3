//! `flowlab report` end to end: a small study run on loopback, its report's statistics
//! checked against the database's own values worked independently, the CSV matching the
//! database, and the HTML page opened in headless Chromium (rendered, not blank, no
//! console message, nothing fetched, one chart per metric).

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

fn flowlab() -> assert_cmd::Command {
    assert_cmd::Command::cargo_bin("flowlab").expect("the flowlab binary")
}

const STUDY: &str = r#"
name = "small"
description = "two lengths, two directions"
repeat = 3

[params]
length = ["8K", "64K"]
[params.direction]
up = ""
down = "-R"

[[server]]
name = "a"

[[step]]
name = "transfer"
kind = "test"
args = "{a.host} -p {a.port} -n 4M -l {length} {direction}"
"#;

fn text(out: &Output) -> String {
    support::said(out)
}

/// Runs the study into `dir`/results.db.
fn run_study(dir: &Path) {
    std::fs::write(dir.join("study.toml"), STUDY).expect("write");
    let out = flowlab()
        .current_dir(dir)
        .args(["run", "study.toml"])
        .timeout(Duration::from_secs(120))
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", text(&out));
}

fn report(dir: &Path, args: &[&str]) -> Output {
    flowlab()
        .current_dir(dir)
        .arg("report")
        .args(args)
        .timeout(Duration::from_secs(60))
        .output()
        .expect("report")
}

/// Student's t at 0.975 with 1 and 2 degrees of freedom (two and three trials), from
/// the table. (A metric may be absent from a trial: the server's CPU of a test too short
/// for it to measure.)
const T_975: [f64; 2] = [12.706_204_736_174_705, 4.302_652_729_911_275];

#[test]
fn the_reports_statistics_and_csv_match_the_database() {
    let dir = tempfile::tempdir().expect("tempdir");
    run_study(dir.path());
    let out = report(dir.path(), &["results.db", "--format", "csv"]);
    assert!(out.status.success(), "{}", text(&out));
    let mut rows = csv::Reader::from_reader(out.stdout.as_slice());
    let header = rows.headers().expect("header").clone();
    assert_eq!(
        header.iter().collect::<Vec<_>>(),
        [
            "study",
            "step",
            "metric",
            "unit",
            "cell",
            "length",
            "direction",
            "n",
            "mean",
            "median",
            "sd",
            "min",
            "max",
            "ci_low",
            "ci_high",
            "ideal"
        ]
    );
    // Every ok trial's metrics, straight from the database.
    let raw = rusqlite::Connection::open(dir.path().join("results.db")).expect("db");
    let mut values: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    let mut q = raw
        .prepare("SELECT cell, metric, value FROM trial_metric WHERE status = 'ok'")
        .expect("query");
    for r in q
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, f64>(2)?,
            ))
        })
        .expect("rows")
    {
        let (cell, metric, value) = r.expect("row");
        values.entry((cell, metric)).or_default().push(value);
    }
    let mut seen = 0;
    let mut metrics = std::collections::BTreeSet::new();
    for rec in rows.records() {
        let rec = rec.expect("record");
        let get = |name: &str| rec[header.iter().position(|h| h == name).expect(name)].to_string();
        let num = |name: &str| get(name).parse::<f64>().expect(name);
        metrics.insert(get("metric"));
        seen += 1;
        // An ideal is worked out for a fetch from several servers only.
        assert_eq!(get("ideal"), "", "{rec:?}");
        let v = &values[&(get("cell"), get("metric"))];
        let n = v.len() as f64;
        assert_eq!(num("n"), n, "{rec:?}");
        if ["throughput_bps", "transfer_s"].contains(&get("metric").as_str()) {
            assert_eq!(n, 3.0, "every trial has it: {rec:?}");
        }
        if n < 2.0 {
            assert_eq!(
                (get("ci_low"), get("sd")),
                (String::new(), "0".to_string()),
                "{rec:?}"
            );
            continue;
        }
        let mean = v.iter().sum::<f64>() / n;
        let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
        let half = T_975[n as usize - 2] * sd / n.sqrt();
        let near = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
        assert!(near(num("mean"), mean), "{rec:?}: mean {mean}");
        assert!(near(num("sd"), sd), "{rec:?}: sd {sd}");
        // statrs' t quantile agrees with the table's to about 1e-9 of it. The interval
        // is cut to what the metric can be: nothing below 0, no share above 100 %.
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-7 * half.max(1e-12);
        let metric = get("metric");
        let top = if ["loss_percent", "integrity_percent"].contains(&metric.as_str()) {
            100.0
        } else {
            f64::INFINITY
        };
        let (low, high) = ((mean - half).max(0.0), (mean + half).min(top));
        assert!(
            close(num("ci_low"), low) && close(num("ci_high"), high),
            "{rec:?}: {} ± {half}, within 0 – {top}",
            mean
        );
        assert_eq!(
            get("cell"),
            format!("length={} direction={}", get("length"), get("direction"))
        );
        if get("metric") == "throughput_bps" {
            assert_eq!(get("unit"), "bit/s");
        }
    }
    // Throughput, transfer time and RTT at least, for each of the four cells.
    for m in ["throughput_bps", "transfer_s"] {
        assert!(metrics.contains(m), "{metrics:?}");
    }
    // A row for every cell the database has each reported metric for.
    let expected = values.keys().filter(|(_, m)| metrics.contains(m)).count();
    assert_eq!(seen, expected);

    let out = report(dir.path(), &["results.db"]);
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.starts_with("# Study small\n"), "{md}");
    assert!(md.contains("12 of 12 trials ok, 0 failed"), "{md}");

    let out = report(
        dir.path(),
        &[
            "results.db",
            "--compare",
            "length=8K direction=up",
            "length=8K direction=down",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("| transfer throughput_bps"),
        "{}",
        text(&out)
    );
    let out = report(
        dir.path(),
        &["results.db", "--compare", "length=9K direction=up", "x"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).contains("--compare: 'length=9K direction=up' is not a cell of study small"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_bad_database_or_study_name_is_refused_clearly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = report(dir.path(), &["none.db"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("none.db: no such results database"),
        "{}",
        text(&out)
    );
    std::fs::write(dir.path().join("junk.db"), "x".repeat(4096)).expect("write");
    let out = report(dir.path(), &["junk.db"]);
    assert!(
        text(&out).contains("junk.db: not a flowlab results database"),
        "{}",
        text(&out)
    );
    assert_eq!(
        std::fs::read(dir.path().join("junk.db"))
            .expect("read")
            .len(),
        4096
    );
    let out = report(dir.path(), &["junk.db", "-o", "r.pdf"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).contains("--out r.pdf: give a name ending in .html, .md, .csv or .json"),
        "{}",
        text(&out)
    );
}

/// Headless Chromium's verdict on a page: its DOM after load, and what it logged.
fn chromium(page: &Path, dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        // Its own scratch files (org.chromium.Chromium.*) go with the test's directory.
        .env("TMPDIR", dir)
        .args(["--enable-logging=stderr", "--v=0"])
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium")
}

#[test]
fn the_html_report_renders_in_a_real_browser() {
    if !support::require_tool("chromium") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    run_study(dir.path());
    let out = report(dir.path(), &["results.db", "-o", "report.html"]);
    assert!(out.status.success(), "{}", text(&out));
    // Said where it went, on stderr; nothing on stdout.
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "wrote report.html (the HTML report of study small)\n"
    );
    assert!(out.stdout.is_empty());
    let page = dir.path().join("report.html");
    let html = std::fs::read_to_string(&page).expect("report.html");
    // Self-contained: nothing to fetch.
    for external in [
        "src=\"http",
        "href=\"http",
        "src='http",
        "@import",
        "url(http",
    ] {
        assert!(
            !html.contains(external),
            "the page fetches something: {external}"
        );
    }

    let dom = chromium(&page, dir.path(), &["--dump-dom"]);
    assert!(dom.status.success(), "{}", text(&dom));
    let logged = String::from_utf8_lossy(&dom.stderr);
    let console: Vec<&str> = logged.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:?}");
    let dom = String::from_utf8_lossy(&dom.stdout);
    let sections: Vec<&str> = dom.split("<section class=\"metric\">").skip(1).collect();
    assert!(
        sections.len() >= 2,
        "a section per metric: {}",
        sections.len()
    );
    for s in &sections {
        let s = &s[..s.find("</section>").expect("closed")];
        assert_eq!(s.matches("<svg").count(), 1, "one chart per metric");
    }

    let shot = dir.path().join("shot.png");
    let out = chromium(
        &page,
        dir.path(),
        &[
            "--window-size=1000,1400",
            &format!("--screenshot={}", shot.display()),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let img = image::open(&shot).expect("a PNG").to_rgb8();
    let total = (img.width() * img.height()) as usize;
    let inked = img
        .pixels()
        .filter(|p| p.0.iter().any(|&c| c < 200))
        .count();
    // The first series' blue, drawn by the charts.
    let blue = img
        .pixels()
        .filter(|p| p.0[2] > 150 && p.0[0] < 80 && p.0[1] > 90 && p.0[1] < 150)
        .count();
    assert!(inked * 50 > total, "{inked} of {total} pixels drawn: blank");
    assert!(blue > 200, "{blue} pixels of the charts' blue");
}

/// A traced test's graphs (window, RTT) come out of the same report, one per cell.
#[test]
fn traced_trials_are_drawn_in_the_html_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    let study = r#"
name = "traced"
repeat = 1
[params]
cc = ["cubic", "bbr"]
[[server]]
name = "a"
[[step]]
name = "up"
kind = "test"
args = "{a.host} -p {a.port} -t 1 -i 0.25 --trace=50ms -C {cc}"
"#;
    std::fs::write(dir.path().join("study.toml"), study).expect("write");
    let out = flowlab()
        .current_dir(dir.path())
        .args(["run", "study.toml"])
        .timeout(Duration::from_secs(120))
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", text(&out));
    let out = report(dir.path(), &["results.db", "-o", "r.html"]);
    assert!(out.status.success(), "{}", text(&out));
    let html = std::fs::read_to_string(dir.path().join("r.html")).expect("r.html");
    let traces = &html[html
        .find("<section class=\"traces\">")
        .expect("a traces section")..];
    let traces = &traces[..traces.find("</section>").expect("closed")];
    for cell in [
        "cc=cubic, step up, repetition 1",
        "cc=bbr, step up, repetition 1",
    ] {
        assert!(traces.contains(&format!("<h3>{cell}</h3>")), "{cell}");
    }
    assert_eq!(traces.matches("<svg").count(), 2);
    assert!(traces.contains("congestion window"), "the window graph");
}
