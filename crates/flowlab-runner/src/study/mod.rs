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
mod places;
mod plan;
mod prepare;
pub mod topology;
mod trial;

pub use execute::{Event, Run, execute};
pub use lines::{Commands, Setup, StepLine, TestLine};
pub use prepare::{Options, Prepared, prepare};

pub use crate::Error as RunError;
