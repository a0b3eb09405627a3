//! Multi-source fragment transfer (seed 000): a file cut into fragments with a manifest
//! of their BLAKE3 hashes, a service that serves them (`flowlab serve --fragments`), and
//! a client that fetches them from several servers at once — by a fixed ratio or
//! adaptively — verifying every fragment before it counts.
//!
//! - [`manifest`]: split, make, join, verify.
//! - [`fetch`]: the client, by ratio or adaptively, verified and resumable.
//! - [`schedule`]: which server fetches which fragment (sans-IO).
//! - [`serve`]: the fragment service on the test port.
//! - `connections`: its connections, bounded, the silent ones first to go.

pub mod fetch;
pub mod manifest;
pub mod schedule;
pub mod serve;

mod connections;
