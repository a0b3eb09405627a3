//! A study file as a user writes it: refused with a place inside the text, or expanded
//! into trials (every cell `repeat` times) whose arguments all render.
#![no_main]

use flowlab_study::parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse(text) {
        Ok(s) => {
            // Capped: a valid study may sweep millions of cells.
            if s.cells().len().saturating_mul(s.repeat as usize) <= 100_000 {
                let plan = s.plan(1);
                assert_eq!(plan.trials.len(), plan.cells.len() * s.repeat as usize);
                for c in &plan.cells {
                    for step in 0..s.steps.len() {
                        let _ = s.args(step, c, &|i| (format!("s{i}"), "5201".into()), "scratch");
                    }
                }
            }
        }
        Err(e) => assert!(e.line >= 1 && e.line <= text.lines().count() + 1 && e.column >= 1),
    }
});
