//! The graphs, from fixed results recorded with `flowlab test -J` (tests/fixtures):
//! what each panel holds, the structure of the SVG (snapshots), and PNGs that are not
//! blank. `latency-cubic.json` and `latency-bbr.json`: `flowlab net exec -t small h1 --
//! flowlab test 10.0.3.2 -t 2 -i 0.5 -C cubic|bbr --latency=100ms -J` through
//! topologies/small.toml's 50 Mbit/s bottleneck (as root, 2 cores).

use std::path::Path;

use flowlab_plot::{Graph, Input, PlotError, panels, render_file, render_svg};

fn load(name: &str) -> Input {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).expect("fixture");
    Input {
        name: name.into(),
        from: path.display().to_string(),
        result: serde_json::from_str(&text).expect("a flowlab result"),
    }
}

/// The structure of an SVG: how many of each drawing element, and every text in order.
/// Coordinates are left out, so the snapshot pins what is drawn and labelled, not where.
fn structure(svg: &str) -> String {
    let mut out = String::new();
    for tag in [
        "<polyline",
        "<polygon",
        "<circle",
        "<rect",
        "<line",
        "<path",
    ] {
        out += &format!("{tag}>: {}\n", svg.matches(tag).count());
    }
    let mut rest = svg;
    while let Some(i) = rest.find("<text") {
        let after = &rest[i..];
        let start = after.find('>').map_or(after.len(), |j| j + 1);
        let end = after.find("</text>").unwrap_or(after.len());
        out += &format!("text: {}\n", after[start..end.max(start)].trim());
        rest = &after[end.max(start)..];
    }
    out
}

fn svg(graph: Graph, inputs: &[Input]) -> String {
    render_svg(&panels(graph, inputs).expect("panels")).expect("svg")
}

#[test]
fn throughput_has_a_line_per_direction_in_readable_units() {
    let p = panels(Graph::Throughput, &[load("small-window")]).expect("panels");
    assert_eq!(p.len(), 1);
    let t = &p[0];
    assert_eq!(t.y_label, "throughput (Gbits/sec)", "the tables' unit");
    assert_eq!(t.series.len(), 1);
    assert_eq!(t.series[0].name, "up");
    // Four 0.25 s intervals, each drawn over its span: the line starts at 0.
    assert_eq!(t.series[0].points.len(), 8);
    assert_eq!(t.series[0].points[0].0, 0.0);
    assert_eq!(t.series[0].points[0].1, t.series[0].points[1].1);
    // Two streams: a line each and their sum.
    let p = panels(Graph::Throughput, &[load("untraced-p2")]).expect("panels");
    let names: Vec<&str> = p[0].series.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["stream 1 up", "stream 3 up", "sum up"]);
    let (s1, s3, sum) = (&p[0].series[0], &p[0].series[1], &p[0].series[2]);
    for i in 0..sum.points.len() {
        let added = s1.points[i].1 + s3.points[i].1;
        assert!((added - sum.points[i].1).abs() < 1e-6 * sum.points[i].1.max(1.0));
    }
}

#[test]
fn window_graph_marks_on_the_receivers_window_where_the_sender_was_at_it() {
    let small = panels(Graph::Window, &[load("small-window")]).expect("panels");
    let large = panels(Graph::Window, &[load("large-window")]).expect("panels");
    let names: Vec<&str> = small[0].series.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["congestion window", "bytes in flight", "receive window"]
    );
    let full = |p: &[flowlab_plot::Panel]| p[0].markers[0].points.len();
    assert!(full(&small) > 5, "a 64 KB window is full most of the time");
    assert!(full(&small) > 4 * full(&large).max(1));
    // Each ring sits on the receiver's window line, at a sample of it.
    let window = &small[0].series[2].points;
    for ring in &small[0].markers[0].points {
        assert!(window.contains(ring), "{ring:?} is not on the window line");
    }
}

#[test]
fn graphs_of_an_untraced_result_say_how_to_get_them() {
    let err = panels(Graph::Window, &[load("untraced-p2")]).expect_err("no trace");
    assert!(matches!(err, PlotError::NoTrace(_)));
    // The file is named as it was given, not by its stem.
    let text = err.to_string();
    assert!(
        text.starts_with(&load("untraced-p2").from)
            && text.contains("untraced-p2.json has no trace")
            && text.contains("--trace"),
        "{text}"
    );
    // "all" draws what it can: throughput only.
    assert_eq!(
        panels(Graph::All, &[load("untraced-p2")])
            .expect("panels")
            .len(),
        1
    );
}

#[test]
fn overlays_are_labelled_by_their_titles_else_the_option_that_differs() {
    let inputs = [load("small-window"), load("large-window")];
    assert_eq!(
        flowlab_plot::labels(&inputs),
        ["small receive window", "large receive window"]
    );
    let p = panels(Graph::Rtt, &inputs).expect("panels");
    assert_eq!(p[0].bands.len(), 2);
    assert!(p[0].series[0].name.starts_with("small receive window, "));
    // Without titles: the option in which they differ.
    let untitled: Vec<_> = inputs
        .iter()
        .map(|i| {
            let mut i = i.clone();
            i.result.start.spec.title = None;
            i
        })
        .collect();
    assert_eq!(
        flowlab_plot::labels(&untitled),
        ["recv_window=65536", "recv_window=4194304"]
    );
}

/// `--latency` results: each probe's round trip over time with the intervals' medians and
/// the idle median, and the distributions, overlaid by congestion control.
#[test]
fn latency_graphs_show_each_probe_and_the_distribution() {
    let inputs = [load("latency-cubic"), load("latency-bbr")];
    let labels = flowlab_plot::labels(&inputs);
    assert_eq!(labels, ["congestion=cubic", "congestion=bbr"]);
    let p = &panels(Graph::Latency, &inputs).expect("panels")[0];
    assert_eq!((p.series.len(), p.dots.len(), p.dashed.len()), (2, 2, 2));
    for (input, dots) in inputs.iter().zip(&p.dots) {
        let l = input.result.latency.as_ref().expect("latency");
        assert_eq!(dots.points.len() as u64, l.loaded.received);
        // x: the reply's arrival in seconds on the test's axis; y: the round trip in ms.
        let (first, probe) = (dots.points[0], &l.probes[0]);
        assert!((first.0 - probe.received_ns.unwrap() as f64 / 1e9).abs() < 1e-9);
        assert!((first.1 - probe.rtt_ns().unwrap() as f64 / 1e6).abs() < 1e-9);
    }
    // The median steps: one per interval, two points each.
    assert_eq!(
        p.series[0].points.len(),
        2 * inputs[0].result.intervals.len()
    );
    let cdf = &panels(Graph::LatencyCdf, &inputs).expect("panels")[0];
    for s in cdf.series.iter().chain(&cdf.dashed) {
        assert!(
            s.points
                .windows(2)
                .all(|w| w[0].0 <= w[1].0 && w[0].1 < w[1].1)
        );
        assert_eq!(s.points.last().map(|p| p.1), Some(1.0), "{}", s.name);
    }
    // Cubic fills the queue: its loaded median is above bbr's.
    let median =
        |s: &flowlab_plot::Series| s.points.iter().find(|p| p.1 >= 0.5).expect("a median").0;
    assert!(median(&cdf.series[0]) > median(&cdf.series[1]));
    // `all` puts both under throughput; an unprobed result says how to get them.
    assert_eq!(panels(Graph::All, &inputs).expect("panels").len(), 3);
    match panels(Graph::LatencyCdf, &[load("untraced-p2")]) {
        Err(e @ PlotError::NoLatency(_)) => assert!(e.to_string().contains("--latency")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn svg_structure_latency() {
    let inputs = [load("latency-cubic"), load("latency-bbr")];
    insta::assert_snapshot!(structure(&svg(Graph::All, &inputs)));
}

#[test]
fn svg_structure_throughput() {
    insta::assert_snapshot!(structure(&svg(Graph::Throughput, &[load("untraced-p2")])));
}

#[test]
fn svg_structure_window() {
    insta::assert_snapshot!(structure(&svg(Graph::Window, &[load("small-window")])));
}

#[test]
fn svg_structure_rtt() {
    insta::assert_snapshot!(structure(&svg(Graph::Rtt, &[load("small-window")])));
}

#[test]
fn svg_structure_time_sequence() {
    insta::assert_snapshot!(structure(&svg(Graph::TimeSeq, &[load("small-window")])));
}

#[test]
fn svg_structure_io() {
    insta::assert_snapshot!(structure(&svg(Graph::Io, &[load("small-window")])));
}

#[test]
fn svg_structure_overlay_of_all_graphs() {
    let inputs = [load("small-window"), load("large-window")];
    insta::assert_snapshot!(structure(&svg(Graph::All, &inputs)));
}

#[test]
fn png_has_the_size_of_its_panels_and_is_not_blank() {
    let dir = std::env::temp_dir().join(format!("flowlab-plot-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("all.png");
    let p = panels(Graph::All, &[load("small-window")]).expect("panels");
    render_file(&p, &path).expect("png");
    let img = image::open(&path).expect("a PNG").to_rgb8();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(img.dimensions(), (1000, 5 * 420));
    let pixels = img.pixels().count();
    let ink = img.pixels().filter(|p| p.0 != [255, 255, 255]).count();
    assert!(ink * 50 > pixels, "at least 2 % drawn: {ink} of {pixels}");
    let mut colours: Vec<[u8; 3]> = img.pixels().map(|p| p.0).collect();
    colours.sort_unstable();
    colours.dedup();
    assert!(
        colours.len() > 20,
        "lines in several colours and text: {}",
        colours.len()
    );
}

#[test]
fn unknown_extensions_are_refused() {
    let p = panels(Graph::Throughput, &[load("small-window")]).expect("panels");
    let err = render_file(&p, Path::new("graph.jpg")).expect_err("not svg or png");
    assert!(matches!(err, PlotError::Format(_)));
}

/// The time/sequence graph's two lines lie on each other on a fast path: "sent" is solid,
/// "acknowledged" dashed on top of it in another colour, each named in the legend
/// (issue 46: the acknowledged line hid the sent one).
#[test]
fn time_sequence_draws_acknowledged_dashed_over_sent() {
    let p = panels(Graph::TimeSeq, &[load("small-window")]).expect("panels");
    let t = &p[0];
    let names: Vec<&str> = t.series.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["sent"]);
    let dashed: Vec<&str> = t.dashed.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(dashed, ["acknowledged"]);
    assert_ne!(t.series[0].colour, t.dashed[0].colour);
    let text = structure(&svg(Graph::TimeSeq, &[load("small-window")]));
    for legend in ["text: sent\n", "text: acknowledged\n"] {
        assert!(text.contains(legend), "{legend} not in the legend: {text}");
    }
}

/// Tick labels carry no needless decimals: "1000", never "1000.0" (issue 46).
#[test]
fn ticks_are_whole_numbers_where_they_are_whole() {
    for graph in [Graph::Throughput, Graph::Window, Graph::TimeSeq] {
        let text = structure(&svg(graph, &[load("small-window")]));
        let ticks: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("text: "))
            .filter(|t| t.parse::<f64>().is_ok())
            .collect();
        assert!(ticks.len() > 4, "{graph:?}: {text}");
        for t in ticks {
            assert!(!t.ends_with(".0"), "{graph:?}: tick {t}");
        }
    }
}
