//! A topology drawn (`flowlab net show --svg`): its nodes in columns by their distance
//! from the first host, its links as lines labelled with what they emulate.
//!
//! The input is plain data ([`Diagram`]): the binary turns a topology file into it, so
//! this crate needs nothing of `flowlab-net`. The layout is deterministic: the same file
//! draws the same picture.

use std::collections::{BTreeMap, VecDeque};

use plotters::prelude::*;

use crate::PlotError;
use crate::draw::{FAMILY, err, register_font};

/// What a node is, as the picture shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// A circle.
    Host,
    /// A square.
    Router,
    /// A flat rectangle.
    Switch,
}

/// A link: its two ends, and its label (rate, delay, queue, loss; one line each way
/// when the directions differ).
#[derive(Debug, Clone, PartialEq)]
pub struct DiagramLink {
    pub a: String,
    pub b: String,
    pub label: Vec<String>,
}

/// A topology to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct Diagram {
    /// Above the drawing: the topology's name.
    pub title: String,
    /// Every node, in the order the file lists them; the first host is the left edge.
    pub nodes: Vec<(String, NodeKind)>,
    pub links: Vec<DiagramLink>,
}

const COLUMN: i32 = 210;
const ROW: i32 = 110;
const MARGIN: i32 = 70;
const TOP: i32 = 60;
const NODE: i32 = 16;

/// Where each node goes: its column is its distance (in links) from the first host,
/// its row its place among the column's nodes: those with more than one link first,
/// then the leaves, each in the order they were reached. A node the first host's links
/// do not reach starts columns of its own at the right.
fn layout(d: &Diagram) -> BTreeMap<&str, (i32, i32)> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for l in &d.links {
        next.entry(&l.a).or_default().push(&l.b);
        next.entry(&l.b).or_default().push(&l.a);
    }
    let first = d
        .nodes
        .iter()
        .find(|(_, k)| *k == NodeKind::Host)
        .or(d.nodes.first())
        .map(|(n, _)| n.as_str());
    let mut column: BTreeMap<&str, i32> = BTreeMap::new();
    let mut order: Vec<&str> = Vec::new();
    let mut queue = VecDeque::new();
    let mut starts: Vec<&str> = first.into_iter().collect();
    starts.extend(d.nodes.iter().map(|(n, _)| n.as_str()));
    let mut base = 0;
    for start in starts {
        if column.contains_key(start) {
            continue;
        }
        column.insert(start, base);
        queue.push_back(start);
        while let Some(n) = queue.pop_front() {
            order.push(n);
            let c = column[n];
            for &m in next.get(n).into_iter().flatten() {
                if !column.contains_key(m) {
                    column.insert(m, c + 1);
                    queue.push_back(m);
                }
            }
        }
        base = column.values().max().map_or(0, |m| m + 1);
    }
    // Within a column the nodes that lead on (routers, switches, hosts between them)
    // come first, so the links between them run along the top row, their labels clear
    // of any node; the leaves (hosts on one link) hang below.
    let leaf = |n: &str| next.get(n).map_or(0, Vec::len) <= 1;
    order.sort_by_key(|n| (column[n], leaf(n)));
    let mut rows: BTreeMap<i32, i32> = BTreeMap::new();
    let mut at = BTreeMap::new();
    for n in order {
        let c = column[n];
        let r = rows.entry(c).or_insert(0);
        at.insert(n, (c, *r));
        *r += 1;
    }
    at
}

/// The drawing as an SVG document.
pub fn topology_svg(d: &Diagram) -> Result<String, PlotError> {
    register_font();
    let at = layout(d);
    let columns = at.values().map(|p| p.0).max().map_or(1, |m| m + 1);
    let rows = at.values().map(|p| p.1).max().map_or(1, |m| m + 1);
    let width = (2 * MARGIN + (columns - 1).max(0) * COLUMN).max(400);
    let height = TOP + MARGIN + (rows - 1).max(0) * ROW + 40;
    let centre = |n: &str| -> (i32, i32) {
        let (c, r) = at.get(n).copied().unwrap_or((0, 0));
        (MARGIN + c * COLUMN, TOP + 20 + r * ROW)
    };
    let mut out = String::new();
    {
        let root =
            SVGBackend::with_string(&mut out, (width as u32, height as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let title = TextStyle::from((FAMILY, 18).into_font()).color(&BLACK);
        root.draw(&Text::new(d.title.clone(), (MARGIN - NODE, 24), title))
            .map_err(err)?;
        let line = RGBColor(120, 120, 120).stroke_width(2);
        let label = TextStyle::from((FAMILY, 12).into_font())
            .color(&RGBColor(60, 60, 60))
            .pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Center,
            ));
        for l in &d.links {
            let (a, b) = (centre(&l.a), centre(&l.b));
            root.draw(&PathElement::new(vec![a, b], line))
                .map_err(err)?;
            let mid = ((a.0 + b.0) / 2, (a.1 + b.1) / 2);
            let lines = l.label.len() as i32;
            for (i, text) in l.label.iter().enumerate() {
                let y = mid.1 + (2 * i as i32 - (lines - 1)) * 7;
                let half = text.chars().count() as i32 * 3 + 4;
                root.draw(&Rectangle::new(
                    [(mid.0 - half, y - 7), (mid.0 + half, y + 7)],
                    WHITE.filled(),
                ))
                .map_err(err)?;
                root.draw(&Text::new(text.clone(), (mid.0, y), label.clone()))
                    .map_err(err)?;
            }
        }
        let name = TextStyle::from((FAMILY, 14).into_font()).color(&BLACK).pos(
            plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Top,
            ),
        );
        for (n, kind) in &d.nodes {
            let (x, y) = centre(n);
            match kind {
                NodeKind::Host => {
                    root.draw(&Circle::new((x, y), NODE, RGBColor(31, 119, 180).filled()))
                }
                NodeKind::Router => root.draw(&Rectangle::new(
                    [(x - NODE, y - NODE), (x + NODE, y + NODE)],
                    RGBColor(255, 127, 14).filled(),
                )),
                NodeKind::Switch => root.draw(&Rectangle::new(
                    [(x - NODE - 6, y - NODE / 2), (x + NODE + 6, y + NODE / 2)],
                    RGBColor(127, 127, 127).filled(),
                )),
            }
            .map_err(err)?;
            root.draw(&Text::new(n.clone(), (x, y + NODE + 4), name.clone()))
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(a: &str, b: &str) -> DiagramLink {
        DiagramLink {
            a: a.into(),
            b: b.into(),
            label: vec![format!("{a}-{b}")],
        }
    }

    #[test]
    fn columns_are_distances_from_the_first_host_and_strays_stand_apart() {
        let d = Diagram {
            title: "t".into(),
            nodes: vec![
                ("r1".into(), NodeKind::Router),
                ("h1".into(), NodeKind::Host),
                ("h2".into(), NodeKind::Host),
                ("h3".into(), NodeKind::Host),
                ("lone".into(), NodeKind::Host),
            ],
            links: vec![link("h1", "r1"), link("r1", "h2"), link("r1", "h3")],
        };
        let at = layout(&d);
        assert_eq!(at["h1"], (0, 0));
        assert_eq!(at["r1"], (1, 0));
        assert_eq!((at["h2"], at["h3"]), ((2, 0), (2, 1)));
        assert_eq!(at["lone"], (3, 0));
    }

    #[test]
    fn in_a_column_the_nodes_that_lead_on_come_before_the_leaves() {
        let d = Diagram {
            title: "t".into(),
            nodes: vec![
                ("h1".into(), NodeKind::Host),
                ("h2".into(), NodeKind::Host),
                ("h3".into(), NodeKind::Host),
                ("s1".into(), NodeKind::Switch),
                ("r1".into(), NodeKind::Router),
                ("r2".into(), NodeKind::Router),
            ],
            links: vec![
                link("h1", "s1"),
                link("s1", "h2"),
                link("s1", "r1"),
                link("r1", "r2"),
                link("r2", "h3"),
            ],
        };
        let at = layout(&d);
        assert_eq!((at["r1"], at["h2"]), ((2, 0), (2, 1)));
        assert_eq!((at["r2"], at["h3"]), ((3, 0), (4, 0)));
    }

    #[test]
    fn every_node_and_label_is_in_the_picture() {
        let d = Diagram {
            title: "small".into(),
            nodes: vec![
                ("h1".into(), NodeKind::Host),
                ("s1".into(), NodeKind::Switch),
                ("r1".into(), NodeKind::Router),
            ],
            links: vec![
                link("h1", "s1"),
                DiagramLink {
                    a: "s1".into(),
                    b: "r1".into(),
                    label: vec!["50 Mbit/s, queue 100".into()],
                },
            ],
        };
        let svg = topology_svg(&d).expect("drawn");
        for text in ["small", "h1", "s1", "r1", "50 Mbit/s, queue 100", "h1-s1"] {
            assert!(
                svg.contains(&format!(">\n{text}\n</text>")),
                "{text} missing:\n{svg}"
            );
        }
        assert_eq!(svg.matches("<circle").count(), 1);
    }
}
