//! Why a run did not start, or stopped.

use std::path::PathBuf;

/// Why a study or a check did not run, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
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
    /// The mesh file does not parse (`text` shows where).
    #[error("{}: {error}", file.display())]
    Mesh {
        file: PathBuf,
        text: String,
        error: flowlab_monitor::mesh::MeshError,
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
    #[error(transparent)]
    Net(#[from] flowlab_net::build::NetError),
    /// What was being done, and what went wrong.
    #[error("{what}: {source}")]
    Because {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl Error {
    /// Whether the study was refused as given (a usage error), before anything ran.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Error::Refused(_) | Error::Parse { .. } | Error::Mesh { .. }
        )
    }
}

/// An error of `what` was being done.
pub(crate) fn io<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
    what: impl Into<String>,
) -> impl FnOnce(E) -> Error {
    let what = what.into();
    move |source| Error::Because {
        what,
        source: source.into(),
    }
}
