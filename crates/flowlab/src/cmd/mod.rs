//! One module per command: its arguments, their validation, and what it does with the
//! libraries' results (each output made by `flowlab_report`).

pub mod fetch;
pub mod fragments;
pub mod net;
pub mod plot;
pub mod quick;
pub mod serve;
pub mod sysinfo;
pub mod test;

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// A flag that the first Ctrl-C sets, to end a measurement cleanly with what it has; a
/// second Ctrl-C exits at once.
pub fn install_ctrl_c() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let presses = AtomicUsize::new(0);
    let f = Arc::clone(&flag);
    let _ = ctrlc::set_handler(move || {
        if presses.fetch_add(1, Ordering::AcqRel) > 0 {
            std::process::exit(130);
        }
        f.store(true, Ordering::Release);
    });
    flag
}

/// Writes `text` to stdout at once (a log or JSON-stream line, table rows as they come).
pub fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}
