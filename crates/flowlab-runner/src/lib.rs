//! What flowlab's laboratory runs, as libraries: a study's trials claimed, run and
//! recorded ([`study`]), a topology's paths checked ([`net_check`]), a mesh watched on a
//! schedule ([`monitor`]), each step at a [`place`] (this machine, one of its network
//! namespaces; a host over SSH next) behind one seam. Progress and outcomes leave as
//! typed events ([`flowlab_results::study`]) for the binary to print, or a web page or a
//! monitor to consume; nothing here prints.

mod error;
pub mod monitor;
pub mod net_check;
pub mod place;
mod servers;
pub mod study;

pub use error::Error;
pub use place::{Local, Place};
