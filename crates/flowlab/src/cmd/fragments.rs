//! `flowlab fragments`: make, split and join fragment sets.

use clap::Subcommand;
use flowlab_fragments::manifest;
use flowlab_report::table;
use flowlab_results::units;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Cut FILE into fragments with a manifest of their BLAKE3 hashes.
    Split {
        /// The file to cut.
        file: std::path::PathBuf,
        /// Number of fragments.
        #[arg(long, default_value_t = 160, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        count: u64,
        /// Directory to write the fragments and their manifest into (created).
        #[arg(long, value_name = "DIR")]
        out: std::path::PathBuf,
    },
    /// Check every fragment in DIR and reassemble the file.
    Join {
        /// The fragment set's directory (its manifest and fragments).
        dir: std::path::PathBuf,
        /// The file to write the joined data to.
        #[arg(long, value_name = "FILE")]
        out: std::path::PathBuf,
    },
    /// Write a fragment set of deterministic test data, without an input file.
    Make {
        /// Total size, e.g. 1G (binary: 1G = 1073741824 bytes).
        #[arg(long, value_parser = units::parse_size)]
        size: u64,
        /// Number of fragments.
        #[arg(long, default_value_t = 160, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        count: u64,
        /// Directory to write the fragments and their manifest into (created).
        #[arg(long, value_name = "DIR")]
        out: std::path::PathBuf,
    },
}

pub fn run(c: &Command) -> anyhow::Result<()> {
    let (m, done) = match c {
        Command::Split { file, count, out } => (
            manifest::split(file, *count as usize, out)?,
            format!("wrote to {}", out.display()),
        ),
        Command::Make { size, count, out } => (
            manifest::make(*size, *count as usize, out)?,
            format!("wrote to {}", out.display()),
        ),
        Command::Join { dir, out } => (
            manifest::join(dir, out)?,
            format!("verified and joined into {}", out.display()),
        ),
    };
    print!("{}", table::fragment_set(&m.file, m.fragments.len(), &done));
    Ok(())
}
