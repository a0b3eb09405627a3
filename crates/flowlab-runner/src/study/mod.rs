//! A whole study, every trial recorded in a results database the moment it ends.
//!
//! 1. [`prepare`]: read and check the study and its topology ([`topology`]), then every
//!    step of every cell as the command's own parser reads it ([`lines`], through the
//!    binary's [`Commands`]): nothing starts unless all of it is valid.
//! 2. [`Prepared::plan`]: the plan a dry run prints.
//! 3. [`execute`]: open the database, record the study (its file and the order's seed);
//!    for each trial in the plan's order, claim it, bring its network up with the
//!    servers on it when another (or none) is up ([`topology`], `servers`), run its
//!    stages at the [`Place`](crate::Place) (`trial`), record it. A stop (Ctrl-C,
//!    SIGTERM) gives the running trial back and keeps every finished one.

mod execute;
pub mod lines;
mod plan;
mod prepare;
mod servers;
pub mod topology;
mod trial;

use std::path::PathBuf;

pub use execute::{Event, Run, execute};
pub use lines::{Commands, Setup, StepLine, TestLine};
pub use prepare::{Options, Prepared, prepare};

/// Why a study did not run, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The study, its topology or an option is refused before anything starts.
    #[error("{0}")]
    Refused(String),
    /// The study file does not parse (`text` shows where).
    #[error("{}: {error}", file.display())]
    Parse {
        file: PathBuf,
        text: String,
        error: flowlab_study::StudyError,
    },
    #[error("cannot read {}", file.display())]
    Read {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Db(#[from] flowlab_db::DbError),
    /// The topology cannot be used or brought up, a server did not start, a setup
    /// command failed.
    #[error("{0}")]
    Failed(String),
    #[error("bringing up topology {name} ({})", file.display())]
    Up {
        name: String,
        file: PathBuf,
        #[source]
        source: flowlab_net::build::NetError,
    },
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl RunError {
    /// Whether the study was refused as given (a usage error), before anything ran.
    pub fn is_refusal(&self) -> bool {
        matches!(self, RunError::Refused(_) | RunError::Parse { .. })
    }
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RunError {
    let what = what.into();
    move |source| RunError::Io { what, source }
}
