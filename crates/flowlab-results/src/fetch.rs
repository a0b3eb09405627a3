//! What a fragment fetch produced: `flowlab fetch --json` ([`FetchResult`]) and
//! `--sweep-ratios` ([`SweepResult`]), filled in by `flowlab_fragments`.

use serde::{Deserialize, Serialize};

/// Schema tag of a fetch result.
pub const SCHEMA: &str = "flowlab.fetch/1";

/// Schema tag of a sweep result.
pub const SWEEP_SCHEMA: &str = "flowlab.fetch-sweep/1";

/// The whole file a set makes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub name: String,
    pub size: u64,
    /// BLAKE3, lower-case hex.
    pub blake3: String,
}

/// One server's share of a fetch.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ServerStats {
    pub address: String,
    /// Fragments it delivered that were kept.
    pub fragments: usize,
    /// Bytes of those fragments.
    pub bytes: u64,
    /// From its first request to its last byte received, seconds.
    pub busy_seconds: f64,
    /// `bytes × 8 / busy_seconds`.
    pub bits_per_second: f64,
    /// Fragments that failed verification (fetched again).
    pub corrupt: usize,
    /// Copies that lost the end-game race (or were cancelled before they started).
    pub duplicates: usize,
    /// Fragments it refused (with its message in `errors`).
    pub refused: usize,
    /// Why it stopped early, if it did.
    pub failed: Option<String>,
    /// What went wrong with single fragments (the first 20).
    pub errors: Vec<String>,
}

/// The outcome of a fetch, as `--json` prints it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FetchResult {
    pub schema: String,
    pub file: FileEntry,
    /// `adaptive` or the ratio, e.g. `1:5`.
    pub mode: String,
    pub fragments: usize,
    /// Already on disk and verified when the fetch started (resumed).
    pub skipped: usize,
    /// Bytes fetched now (not counting skipped fragments).
    pub bytes: u64,
    pub seconds: f64,
    pub bits_per_second: f64,
    pub servers: Vec<ServerStats>,
}

/// One mode's runs in a sweep.
#[derive(Debug, Clone, Serialize)]
pub struct SweepRow {
    /// `1:5`, …, or `adaptive`.
    pub mode: String,
    /// Total transfer time of each run, seconds.
    pub seconds: Vec<f64>,
    pub mean_seconds: f64,
}

/// `--sweep-ratios`: seed 000's Table 2 in one command.
#[derive(Debug, Clone, Serialize)]
pub struct SweepResult {
    pub schema: String,
    pub file: FileEntry,
    pub servers: Vec<String>,
    pub repeat: usize,
    pub rows: Vec<SweepRow>,
}
