//! Property tests of what the fragment code reads from users and servers: ratios typed
//! on the command line, and manifests a server sends (untrusted). Any input is answered
//! with a value or an error, never a panic; what is valid reads back as written.

use std::path::Path;

use flowlab_fragments::manifest::{FragmentEntry, MAX_FRAGMENTS, Manifest, SCHEMA};
use flowlab_fragments::schedule::parse_ratio;
use flowlab_results::fetch::FileEntry;
use proptest::prelude::*;

fn hash() -> impl Strategy<Value = String> {
    "[0-9a-f]{64}"
}

/// A valid manifest: unique plain names, sizes adding up to the file's.
fn manifest() -> impl Strategy<Value = Manifest> {
    (
        // Names as `fragments split` writes them (no "..", which is refused anywhere).
        prop::collection::btree_map(
            "[a-z0-9][a-z0-9_-]{0,16}(\\.[a-z0-9]{1,4})?",
            (0u64..1 << 40, hash()),
            1..20,
        ),
        "[a-z0-9._-]{1,20}",
        hash(),
    )
        .prop_map(|(frags, name, whole)| {
            let fragments: Vec<FragmentEntry> = frags
                .into_iter()
                .filter(|(n, _)| n != "manifest.json")
                .map(|(name, (size, blake3))| FragmentEntry {
                    name,
                    size,
                    blake3,
                    sha256: None,
                })
                .collect();
            Manifest {
                schema: SCHEMA.into(),
                file: FileEntry {
                    name,
                    size: fragments.iter().map(|f| f.size).sum(),
                    blake3: whole,
                },
                fragments,
            }
        })
        .prop_filter("at least one fragment", |m| !m.fragments.is_empty())
}

/// `m` as a server would send it.
fn wire(m: &Manifest) -> Vec<u8> {
    serde_json::to_vec(m).expect("serialisable")
}

fn parse(bytes: &[u8]) -> Result<Manifest, flowlab_fragments::manifest::ManifestError> {
    Manifest::parse(bytes, Path::new("server:5201"))
}

proptest! {
    #[test]
    fn ratios_typed_any_way_parse_or_say_what_a_ratio_is(text in ".{0,24}") {
        if let Err(e) = parse_ratio(&text) {
            prop_assert!(e.to_string().contains("not a ratio like 1:5"), "{e}");
        }
    }

    #[test]
    fn ratios_read_back_as_written(parts in prop::collection::vec(1u32..=1000, 2..8), spaced in any::<bool>()) {
        let sep = if spaced { " : " } else { ":" };
        let text = parts.iter().map(u32::to_string).collect::<Vec<_>>().join(sep);
        prop_assert_eq!(parse_ratio(&text), Ok(parts));
    }

    #[test]
    fn ratios_with_one_part_a_zero_or_a_part_over_1000_are_refused(a in 0u32..2000, b in 1001u32..100_000) {
        for text in [a.to_string(), format!("{a}:0"), format!("1:{b}")] {
            prop_assert!(parse_ratio(&text).is_err(), "{} parsed", text);
        }
    }

    #[test]
    fn manifests_of_random_bytes_are_refused_not_panicked_on(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse(&bytes);
    }

    #[test]
    fn valid_manifests_read_back_as_written(m in manifest()) {
        prop_assert_eq!(parse(&wire(&m)).ok(), Some(m));
    }

    #[test]
    fn a_manifest_whose_sizes_do_not_add_up_is_refused(m in manifest(), extra in 1u64..1 << 40) {
        let mut m = m;
        m.file.size += extra;
        let e = parse(&wire(&m)).expect_err("refused");
        prop_assert!(e.to_string().contains("add up"), "{e}");
    }

    #[test]
    fn fragment_sizes_whose_sum_wraps_around_are_refused(m in manifest(), big in (u64::MAX / 2)..=u64::MAX) {
        // A hostile server's sizes that add up to the file's size modulo 2^64.
        let mut m = m;
        let others: u64 = m.fragments.iter().map(|f| f.size).sum();
        m.fragments.push(FragmentEntry {
            name: "zz-big".into(),
            size: big,
            blake3: "0".repeat(64),
            sha256: None,
        });
        m.fragments.push(FragmentEntry {
            name: "zz-wrap".into(),
            size: u64::MAX - big + 1,
            blake3: "0".repeat(64),
            sha256: None,
        });
        m.file.size = others;
        let e = parse(&wire(&m)).expect_err("refused");
        prop_assert!(e.to_string().contains("more than 2^64 bytes"), "{e}");
    }

    #[test]
    fn names_that_leave_the_directory_or_are_reserved_are_refused(
        m in manifest(),
        bad in prop::sample::select(vec!["../x", "/etc/passwd", "a/b", ".hidden", "manifest.json", "", "x\0y"]),
    ) {
        let mut m = m;
        m.fragments[0].name = bad.into();
        prop_assert!(parse(&wire(&m)).is_err());
    }

    #[test]
    fn a_name_given_twice_is_refused(m in manifest()) {
        let mut m = m;
        let twin = m.fragments[0].clone();
        m.file.size += twin.size;
        m.fragments.push(twin);
        let e = parse(&wire(&m)).expect_err("refused");
        prop_assert!(e.to_string().contains("appears twice"), "{e}");
    }
}

#[test]
fn a_set_larger_than_the_limit_is_refused() {
    let zero = "0".repeat(64);
    let entry = format!(r#"{{"name":"a","size":0,"blake3":"{zero}"}}"#);
    let text = format!(
        r#"{{"schema":"{SCHEMA}","file":{{"name":"f","size":0,"blake3":"{zero}"}},"fragments":[{}]}}"#,
        vec![entry; MAX_FRAGMENTS + 1].join(",")
    );
    let e = parse(text.as_bytes()).expect_err("too many");
    assert!(
        e.to_string()
            .contains(&format!("{} fragments", MAX_FRAGMENTS + 1)),
        "{e}"
    );
}
