//! The scheduler's recorded answers: each file of tests/fixtures/schedule/ is a scenario
//! (mode, fragments, connections' servers, fragments already done) and a sequence of
//! calls with what the scheduler answered and its state after each. The Rust scheduler
//! must give them again; the pages' JavaScript port (crates/flowlab-web/assets/
//! schedule.js) replays the same files in a real browser (crates/flowlab/tests/http.rs),
//! so the two cannot drift.
//!
//! The files are made by this test's simulator, from fixed seeds: after a deliberate
//! change of the scheduler's answers, `FLOWLAB_BLESS=1 cargo test -p flowlab-fragments
//! --test schedule_fixtures` writes them again (and the port must follow).

use std::path::PathBuf;

use flowlab_fragments::schedule::{FragmentId, Mode, Outcome, Scheduler, ServerId};
use serde_json::{Value, json};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schedule")
}

/// A scenario: its name, mode, fragments, each worker's server, the fragments done.
struct Scenario {
    name: &'static str,
    mode: Mode,
    fragments: usize,
    owner: Vec<ServerId>,
    done: Vec<FragmentId>,
    /// Share of deliveries that fail verification.
    corrupt: u32,
    seed: u64,
}

fn scenarios() -> Vec<Scenario> {
    let s =
        |name, mode, fragments, owner: &[ServerId], done: &[FragmentId], corrupt, seed| Scenario {
            name,
            mode,
            fragments,
            owner: owner.to_vec(),
            done: done.to_vec(),
            corrupt,
            seed,
        };
    vec![
        s(
            "adaptive-two-servers",
            Mode::Adaptive,
            24,
            &[0, 1],
            &[],
            5,
            1,
        ),
        s(
            "adaptive-two-connections-each-resumed",
            Mode::Adaptive,
            40,
            &[0, 0, 1, 1],
            &[0, 3, 17],
            10,
            2,
        ),
        s(
            "adaptive-corrupt-copies",
            Mode::Adaptive,
            16,
            &[0, 1, 1],
            &[],
            45,
            3,
        ),
        s("ratio-1-2", Mode::Ratio(vec![1, 2]), 30, &[0, 1], &[], 5, 4),
        s(
            "ratio-3-1-two-connections-each",
            Mode::Ratio(vec![3, 1]),
            36,
            &[0, 0, 1, 1],
            &[5],
            15,
            5,
        ),
        s(
            "ratio-a-server-without-connections",
            Mode::Ratio(vec![1, 2]),
            12,
            &[1],
            &[],
            30,
            6,
        ),
        s(
            "three-servers-adaptive",
            Mode::Adaptive,
            50,
            &[0, 1, 2],
            &[],
            10,
            7,
        ),
    ]
}

/// xorshift64*: the same calls from the same seed, with no crate for it.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

fn mode_json(mode: &Mode) -> Value {
    match mode {
        Mode::Adaptive => json!({"adaptive": true}),
        Mode::Ratio(r) => json!({ "ratio": r }),
    }
}

fn outcome_json(o: &Outcome) -> Value {
    match o {
        Outcome::Accepted { cancel } => json!({ "accepted": cancel }),
        Outcome::Duplicate => json!("duplicate"),
        Outcome::Corrupt => json!("corrupt"),
    }
}

fn state(s: &Scheduler, servers: usize) -> Value {
    let alive: Vec<bool> = (0..servers).map(|v| s.server_alive(v)).collect();
    json!([s.remaining(), s.is_done(), s.is_stuck(), alive])
}

/// One call on `s` as a fixture writes it: (call, answer).
fn call(s: &mut Scheduler, c: &Value) -> Value {
    let arg = |i: usize| c[i].as_u64().expect("a number") as usize;
    let flag = |i: usize| c[i].as_bool().expect("a flag");
    match c[0].as_str().expect("a call's name") {
        "next" => json!(s.next(arg(1))),
        "delivered" => outcome_json(&s.delivered(arg(1), arg(2), flag(3))),
        "dropped" => {
            s.dropped(arg(1), arg(2), flag(3));
            Value::Null
        }
        "failed" => {
            s.failed(arg(1));
            Value::Null
        }
        other => panic!("no call {other}"),
    }
}

fn servers(owner: &[ServerId], mode: &Mode) -> usize {
    let by_owner = owner.iter().max().map_or(0, |m| m + 1);
    match mode {
        Mode::Ratio(r) => by_owner.max(r.len()),
        Mode::Adaptive => by_owner,
    }
}

/// A scenario's calls, made by a fetch's way of calling: connections ask for work,
/// deliver what they hold oldest first (now and then a bad copy), a winner's copies
/// elsewhere are cancelled, now and then a refusal or a connection lost.
fn simulate(sc: &Scenario) -> Value {
    let done: Vec<bool> = (0..sc.fragments).map(|f| sc.done.contains(&f)).collect();
    let mut s = Scheduler::new(sc.mode.clone(), sc.fragments, &sc.owner, &done);
    let workers = sc.owner.len();
    let servers = servers(&sc.owner, &sc.mode);
    let mut rng = Rng(sc.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut held: Vec<Vec<FragmentId>> = vec![Vec::new(); workers];
    let mut calls = Vec::new();
    let mut record = |s: &mut Scheduler, c: Value| -> Value {
        let gives = call(s, &c);
        calls.push(json!({"call": c, "gives": gives, "then": state(s, servers)}));
        gives
    };
    let mut failed = 0;
    for _ in 0..400 {
        if s.is_done() || s.is_stuck() {
            break;
        }
        let w = rng.below(workers as u64) as usize;
        match rng.below(14) {
            0..6 => {
                if let Some(f) = record(&mut s, json!(["next", w])).as_u64() {
                    held[w].push(f as usize);
                }
            }
            6..12 if !held[w].is_empty() => {
                let f = held[w].remove(0);
                let ok = rng.below(100) >= u64::from(sc.corrupt);
                let gives = record(&mut s, json!(["delivered", w, f, ok]));
                for c in gives["accepted"].as_array().into_iter().flatten() {
                    let c = c.as_u64().expect("a worker") as usize;
                    held[c].retain(|&x| x != f);
                    record(&mut s, json!(["dropped", c, f, false]));
                }
            }
            12 if !held[w].is_empty() => {
                let f = held[w].remove(0);
                let refused = rng.below(2) == 0;
                record(&mut s, json!(["dropped", w, f, refused]));
            }
            // At most one connection lost a scenario, late in it: the others finish.
            13 if failed == 0 && workers > 1 && s.remaining() < sc.fragments / 3 => {
                failed += 1;
                held[w].clear();
                record(&mut s, json!(["failed", w]));
            }
            _ => {}
        }
    }
    json!({
        "name": sc.name,
        "mode": mode_json(&sc.mode),
        "fragments": sc.fragments,
        "owner": sc.owner,
        "done": done,
        "servers": servers,
        "calls": calls,
    })
}

/// A fixture as written: its scenario, then a call a line.
fn fixture_text(f: &Value) -> String {
    let mut head = f.clone();
    let calls = head
        .as_object_mut()
        .and_then(|o| o.remove("calls"))
        .unwrap_or_default();
    let head = serde_json::to_string(&head).expect("JSON");
    let lines: Vec<String> = calls
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| format!("  {c}"))
        .collect();
    format!(
        "{},\n\"calls\": [\n{}\n]}}\n",
        head.trim_end_matches('}'),
        lines.join(",\n")
    )
}

/// Replays a fixture's calls on a new scheduler: the first call whose answer or state
/// differs from the recorded one, if any.
fn replay(fixture: &Value) -> Option<String> {
    let mode = match fixture["mode"].get("ratio") {
        Some(r) => Mode::Ratio(
            r.as_array()
                .expect("a ratio")
                .iter()
                .map(|k| k.as_u64().expect("a part") as u32)
                .collect(),
        ),
        None => Mode::Adaptive,
    };
    let owner: Vec<ServerId> = serde_json::from_value(fixture["owner"].clone()).expect("owner");
    let done: Vec<bool> = serde_json::from_value(fixture["done"].clone()).expect("done");
    let n = fixture["fragments"].as_u64().expect("fragments") as usize;
    let servers = fixture["servers"].as_u64().expect("servers") as usize;
    let mut s = Scheduler::new(mode, n, &owner, &done);
    for (i, c) in fixture["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .enumerate()
    {
        let gives = call(&mut s, &c["call"]);
        let then = state(&s, servers);
        if gives != c["gives"] || then != c["then"] {
            return Some(format!(
                "call {i} {}: gave {gives} then {then}, recorded {} then {}",
                c["call"], c["gives"], c["then"]
            ));
        }
    }
    None
}

#[test]
fn the_scheduler_gives_its_recorded_answers_again() {
    let bless = std::env::var_os("FLOWLAB_BLESS").is_some();
    for sc in scenarios() {
        let path = dir().join(format!("{}.json", sc.name));
        let made = simulate(&sc);
        if bless {
            std::fs::create_dir_all(dir()).expect("the fixtures' directory");
            std::fs::write(&path, fixture_text(&made)).expect("a fixture");
        }
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (FLOWLAB_BLESS=1 makes it)", path.display()));
        let fixture: Value = serde_json::from_str(&text).expect("a fixture's JSON");
        if let Some(diff) = replay(&fixture) {
            panic!("{}: {diff}", path.display());
        }
        // Each scenario ends its work (or is stuck, its servers gone) and exercises what
        // it is named for.
        let calls = fixture["calls"].as_array().expect("calls");
        let last = &calls.last().expect("a call")["then"];
        assert!(
            last[1] == true || last[2] == true,
            "{}: ended neither done nor stuck: {last}",
            sc.name
        );
        let count = |name: &str| calls.iter().filter(|c| c["call"][0] == name).count();
        assert!(count("next") > sc.fragments - sc.done.len(), "{}", sc.name);
        if sc.corrupt >= 10 {
            assert!(
                calls.iter().any(|c| c["gives"] == "corrupt"),
                "{}: no bad copy",
                sc.name
            );
        }
        assert_eq!(
            made, fixture,
            "{}: the simulator makes the file again",
            sc.name
        );
    }
}

/// A changed answer is caught: the replay is no tautology.
#[test]
fn a_changed_answer_is_caught() {
    let path = dir().join("adaptive-two-servers.json");
    let mut fixture: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("a fixture")).expect("JSON");
    let calls = fixture["calls"].as_array_mut().expect("calls");
    let next = calls
        .iter_mut()
        .find(|c| c["call"][0] == "next" && c["gives"].is_u64())
        .expect("a next that gave a fragment");
    next["gives"] = json!(next["gives"].as_u64().expect("a fragment") + 1);
    assert!(replay(&fixture).is_some());
}
