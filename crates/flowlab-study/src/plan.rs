//! A study expanded: its cells (one value of every parameter, less the exclusions) and
//! its trials (each cell `repeat` times), in the order they run.

use crate::file::{Fill, Order, ServerPart, Study};

/// Where a study's server listens, as a step's arguments name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerAddress {
    pub host: String,
    pub port: u16,
    /// Its QUIC port, when it serves QUIC (`--quic`).
    pub quic_port: Option<u16>,
}

/// Fills a template of parameters only (a `[[link]]`'s values).
struct ParamsOnly<'a> {
    study: &'a Study,
    cell: &'a Cell,
}

impl Fill for ParamsOnly<'_> {
    fn param(&self, p: usize, part: Option<&str>) -> String {
        self.study.params[p].values[self.cell.0[p]]
            .get(part)
            .to_string()
    }
    fn server(&self, _: usize, _: ServerPart) -> String {
        unreachable!("a link's template names no server (checked when the file is read)")
    }
    fn scratch(&self) -> String {
        unreachable!("a link's template has no {{scratch}} (checked when the file is read)")
    }
}

/// One combination of parameter values: a value index per parameter, in the study's
/// order of parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell(pub Vec<usize>);

/// One run of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trial {
    /// Index into [`Plan::cells`].
    pub cell: usize,
    /// From 1.
    pub repetition: u32,
}

/// What a study runs, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub cells: Vec<Cell>,
    pub trials: Vec<Trial>,
    /// The seed the random order was drawn with (recorded, so it can be drawn again).
    pub seed: u64,
}

impl Study {
    /// Every cell, the last parameter varying fastest, excluded ones left out. A study
    /// without parameters has one cell.
    pub fn cells(&self) -> Vec<Cell> {
        let mut cells = vec![Cell(Vec::new())];
        for p in &self.params {
            cells = cells
                .into_iter()
                .flat_map(|c| {
                    (0..p.values.len()).map(move |v| {
                        let mut next = c.0.clone();
                        next.push(v);
                        Cell(next)
                    })
                })
                .collect();
        }
        cells.retain(|c| {
            !self
                .excludes
                .iter()
                .any(|ex| ex.iter().all(|&(p, v)| c.0[p] == v))
        });
        cells
    }

    /// The trials in the order they run: cell by cell for a sequential study, shuffled
    /// with `seed` (the file's, when it gives one) for a random one.
    ///
    /// When the study changes its topology's links (`[[link]]`), the topology is built
    /// anew for each set of link values (a *network*), so trials on one network run
    /// together: a sequential study runs network by network, and a random one in rounds,
    /// one per repetition, each visiting every network once in a shuffled order with
    /// that network's trials shuffled. Drift over time then spreads over every network
    /// too, at the cost of `repeat` × networks bring-ups.
    pub fn plan(&self, seed: u64) -> Plan {
        let cells = self.cells();
        let seed = self.seed.unwrap_or(seed);
        let mut trials: Vec<Trial> = (0..cells.len())
            .flat_map(|cell| (1..=self.repeat).map(move |repetition| Trial { cell, repetition }))
            .collect();
        let network = self.networks(&cells);
        let networks = network.iter().max().map_or(0, |n| n + 1);
        let mut rng = fastrand::Rng::with_seed(seed);
        match self.order {
            Order::Sequential => trials.sort_by_key(|t| network[t.cell]),
            Order::Random if networks <= 1 => rng.shuffle(&mut trials),
            Order::Random => {
                let mut rounds = Vec::with_capacity(trials.len());
                for repetition in 1..=self.repeat {
                    let mut order: Vec<usize> = (0..networks).collect();
                    rng.shuffle(&mut order);
                    for n in order {
                        let mut round: Vec<Trial> = trials
                            .iter()
                            .filter(|t| t.repetition == repetition && network[t.cell] == n)
                            .copied()
                            .collect();
                        rng.shuffle(&mut round);
                        rounds.extend(round);
                    }
                }
                trials = rounds;
            }
        }
        Plan {
            cells,
            trials,
            seed,
        }
    }

    /// For each of `cells`, the index of its network: cells whose `[[link]]` values are
    /// the same share one (numbered in the order of their first cell). All 0 when the
    /// study changes no link.
    pub fn networks(&self, cells: &[Cell]) -> Vec<usize> {
        let params: Vec<usize> = self
            .links
            .iter()
            .flat_map(|l| l.set.iter().flat_map(|(_, t)| t.params()))
            .collect();
        let mut seen: Vec<Vec<usize>> = Vec::new();
        cells
            .iter()
            .map(|c| {
                let key: Vec<usize> = params.iter().map(|&p| c.0[p]).collect();
                seen.iter().position(|k| *k == key).unwrap_or_else(|| {
                    seen.push(key);
                    seen.len() - 1
                })
            })
            .collect()
    }

    /// The link properties `cell` sets: (link, property, value), in the file's order.
    pub fn link_values(&self, cell: &Cell) -> Vec<(String, String, String)> {
        let fill = ParamsOnly { study: self, cell };
        self.links
            .iter()
            .flat_map(|l| {
                l.set
                    .iter()
                    .map(|(key, t)| (l.link.clone(), key.clone(), t.render(&fill)))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// How results name a cell: `length=1000 method=tcp-stream`.
    pub fn cell_label(&self, cell: &Cell) -> String {
        self.params
            .iter()
            .zip(&cell.0)
            .map(|(p, &v)| format!("{}={}", p.name, p.values[v].label))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Step `step`'s arguments for `cell`, servers' addresses from `address` (index
    /// into [`Study::servers`] → where it listens), `{scratch}` as `scratch`.
    pub fn args(
        &self,
        step: usize,
        cell: &Cell,
        address: &dyn Fn(usize) -> ServerAddress,
        scratch: &str,
    ) -> String {
        struct Filler<'a> {
            study: &'a Study,
            cell: &'a Cell,
            address: &'a dyn Fn(usize) -> ServerAddress,
            scratch: &'a str,
        }
        impl Fill for Filler<'_> {
            fn param(&self, p: usize, part: Option<&str>) -> String {
                self.study.params[p].values[self.cell.0[p]]
                    .get(part)
                    .to_string()
            }
            fn server(&self, s: usize, part: ServerPart) -> String {
                let ServerAddress {
                    host,
                    port,
                    quic_port,
                } = (self.address)(s);
                match part {
                    ServerPart::Host => host,
                    ServerPart::Port => port.to_string(),
                    // Only a server given --quic is named so (the file is refused
                    // otherwise), and it says its QUIC port when it starts.
                    ServerPart::QuicPort => quic_port.unwrap_or(0).to_string(),
                    // An IPv6 address in brackets, as `host:port` is read everywhere.
                    ServerPart::Address if host.contains(':') => format!("[{host}]:{port}"),
                    ServerPart::Address => format!("{host}:{port}"),
                }
            }
            fn scratch(&self) -> String {
                self.scratch.to_string()
            }
        }
        self.steps[step].args.render(&Filler {
            study: self,
            cell,
            address,
            scratch,
        })
    }

    /// The steps in the order they start: each a list of steps that run at the same
    /// time (one step, or a group where its first step is).
    pub fn stages(&self) -> Vec<Vec<usize>> {
        let mut stages: Vec<Vec<usize>> = Vec::new();
        let mut group_at: Vec<(&str, usize)> = Vec::new();
        for (i, step) in self.steps.iter().enumerate() {
            match &step.group {
                Some(g) => match group_at.iter().find(|(name, _)| name == g) {
                    Some(&(_, stage)) => stages[stage].push(i),
                    None => {
                        group_at.push((g, stages.len()));
                        stages.push(vec![i]);
                    }
                },
                None => stages.push(vec![i]),
            }
        }
        stages
    }
}
