//! Studies: one file declaring a whole experiment — the parameters it sweeps, how many
//! times each combination runs, and the measurements of one trial — checked
//! ([`file::parse`]) and expanded into cells and trials ([`plan`]). Sans-IO: the runner,
//! the results database and the report build on these.

pub mod file;
pub mod plan;
pub mod ssh;

pub use file::{MEDIUM_PROPERTIES, Study, StudyError, parse};
pub use plan::{Cell, Plan, ServerAddress, Trial};
