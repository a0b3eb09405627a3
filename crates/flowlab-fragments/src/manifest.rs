//! A fragment set on disk: the fragments and `manifest.json`, which names them with
//! their sizes and BLAKE3 hashes and says what whole file they make.
//!
//! `split` cuts a file into `count` fragments of equal size (the last one shorter),
//! `make` writes deterministic test data the same way without an input file, `join`
//! reassembles a set and checks every fragment and the whole file against the manifest.

use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use flowlab_proto::fragment::check_name;
use flowlab_results::fetch::FileEntry;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The manifest's file name inside a fragment directory.
pub const MANIFEST: &str = "manifest.json";
/// Schema tag of the manifest.
pub const SCHEMA: &str = "flowlab.fragments/1";
/// Most fragments in one set.
pub const MAX_FRAGMENTS: usize = 100_000;

/// What went wrong with a fragment set.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{0}: not a flowlab fragment manifest: {1}")]
    Invalid(PathBuf, String),
    #[error("fragment {name}: {problem}")]
    Fragment { name: String, problem: String },
    #[error("--count must be between 1 and {MAX_FRAGMENTS} (and at most the file's size)")]
    Count,
    #[error("the joined file's hash {got} differs from the manifest's {want}")]
    WholeFile { got: String, want: String },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ManifestError + '_ {
    move |source| ManifestError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One fragment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FragmentEntry {
    pub name: String,
    pub size: u64,
    pub blake3: String,
    /// The fragment's SHA-256, for pages (browsers' WebCrypto has no BLAKE3): written by
    /// `make` and `split`, absent from sets made before it (which `flowlab fetch`,
    /// verifying BLAKE3, reads as before; older flowlabs ignore it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub schema: String,
    pub file: FileEntry,
    /// In file order: joining them in this order gives the file.
    pub fragments: Vec<FragmentEntry>,
}

impl Manifest {
    /// Parses and checks a manifest: schema, names (no path tricks), no duplicates,
    /// sizes adding up to the file's.
    pub fn parse(text: &[u8], path: &Path) -> Result<Manifest, ManifestError> {
        let bad = |m: String| ManifestError::Invalid(path.to_path_buf(), m);
        let m: Manifest = serde_json::from_slice(text).map_err(|e| bad(e.to_string()))?;
        if m.schema != SCHEMA {
            return Err(bad(format!("schema '{}', expected '{SCHEMA}'", m.schema)));
        }
        if hex32(&m.file.blake3).is_none() {
            return Err(bad("the file's hash is not 64 hex digits".into()));
        }
        if m.fragments.is_empty() || m.fragments.len() > MAX_FRAGMENTS {
            return Err(bad(format!("{} fragments", m.fragments.len())));
        }
        let mut names: Vec<&str> = m.fragments.iter().map(|f| f.name.as_str()).collect();
        for f in &m.fragments {
            check_name(&f.name).map_err(|p| bad(format!("fragment name {:?}: {p}", f.name)))?;
            if f.name == MANIFEST || f.name.starts_with('.') {
                return Err(bad(format!("fragment name {:?} is reserved", f.name)));
            }
            if hex32(&f.blake3).is_none() {
                return Err(bad(format!(
                    "fragment {}: hash is not 64 hex digits",
                    f.name
                )));
            }
            if f.sha256.as_deref().is_some_and(|h| hex32(h).is_none()) {
                return Err(bad(format!(
                    "fragment {}: sha256 is not 64 hex digits",
                    f.name
                )));
            }
        }
        names.sort_unstable();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return Err(bad("a fragment name appears twice".into()));
        }
        // Added without wrapping: a hostile server's sizes could sum to the file's
        // modulo 2^64.
        let total = m
            .fragments
            .iter()
            .try_fold(0u64, |sum, f| sum.checked_add(f.size));
        if total != Some(m.file.size) {
            return Err(bad(match total {
                Some(total) => format!(
                    "fragments add up to {total} bytes, the file has {}",
                    m.file.size
                ),
                None => "fragment sizes add up to more than 2^64 bytes".into(),
            }));
        }
        Ok(m)
    }

    /// Reads `DIR/manifest.json`.
    pub fn load(dir: &Path) -> Result<Manifest, ManifestError> {
        let path = dir.join(MANIFEST);
        let text = read_regular(&path).map_err(io_err(&path))?;
        Manifest::parse(&text, &path)
    }

    /// Writes `DIR/manifest.json`.
    pub fn save(&self, dir: &Path) -> Result<(), ManifestError> {
        let path = dir.join(MANIFEST);
        let text = serde_json::to_vec_pretty(self).unwrap_or_default();
        fs::write(&path, text).map_err(io_err(&path))
    }
}

/// A regular file's bytes; anything else (a FIFO, a device) is refused, not waited on:
/// it is opened without blocking and looked at before it is read.
fn read_regular(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut text = Vec::new();
    f.read_to_end(&mut text)?;
    Ok(text)
}

/// Parses 64 hex digits into a hash.
pub fn hex32(s: &str) -> Option<[u8; 32]> {
    // Exactly the form `hex` writes, so that a hash compares the same as text and as bytes.
    if s.len() != 64 || !s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Lower-case hex of a hash.
pub fn hex(h: &[u8; 32]) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

/// Fragment names for `base` split in `count`: `base.000` … (at least three digits).
fn fragment_name(base: &str, i: usize, count: usize) -> String {
    let width = count.saturating_sub(1).to_string().len().max(3);
    format!("{base}.{i:0width$}")
}

/// Sizes of `count` fragments of a `size`-byte file: as equal as can be (the first
/// `size % count` are one byte longer).
pub fn fragment_sizes(size: u64, count: usize) -> Result<Vec<u64>, ManifestError> {
    if count == 0 || count > MAX_FRAGMENTS || count as u64 > size {
        return Err(ManifestError::Count);
    }
    let (base, extra) = (size / count as u64, size % count as u64);
    Ok((0..count as u64)
        .map(|i| base + u64::from(i < extra))
        .collect())
}

/// Writes fragments of `source` (read sequentially) into `out`; returns the manifest.
fn write_fragments(
    mut source: impl Read,
    file_name: &str,
    size: u64,
    count: usize,
    out: &Path,
) -> Result<Manifest, ManifestError> {
    fs::create_dir_all(out).map_err(io_err(out))?;
    let mut whole = blake3::Hasher::new();
    let mut fragments = Vec::with_capacity(count);
    let mut buf = vec![0u8; 1 << 20];
    for (i, fsize) in fragment_sizes(size, count)?.into_iter().enumerate() {
        let name = fragment_name(file_name, i, count);
        let path = out.join(&name);
        let mut w = BufWriter::new(File::create(&path).map_err(io_err(&path))?);
        let mut h = blake3::Hasher::new();
        let mut sha = Sha256::new();
        let mut left = fsize;
        while left > 0 {
            let n = (left as usize).min(buf.len());
            source.read_exact(&mut buf[..n]).map_err(io_err(&path))?;
            h.update(&buf[..n]);
            sha.update(&buf[..n]);
            whole.update(&buf[..n]);
            w.write_all(&buf[..n]).map_err(io_err(&path))?;
            left -= n as u64;
        }
        w.flush().map_err(io_err(&path))?;
        fragments.push(FragmentEntry {
            name,
            size: fsize,
            blake3: h.finalize().to_hex().to_string(),
            sha256: Some(hex(&sha.finalize().into())),
        });
    }
    let m = Manifest {
        schema: SCHEMA.into(),
        file: FileEntry {
            name: file_name.into(),
            size,
            blake3: whole.finalize().to_hex().to_string(),
        },
        fragments,
    };
    m.save(out)?;
    Ok(m)
}

/// `flowlab fragments split FILE --count N --out DIR`.
pub fn split(file: &Path, count: usize, out: &Path) -> Result<Manifest, ManifestError> {
    let f = File::open(file).map_err(io_err(file))?;
    let size = f.metadata().map_err(io_err(file))?.len();
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| check_name(n).is_ok())
        .unwrap_or("file")
        .to_string();
    write_fragments(std::io::BufReader::new(f), &name, size, count, out)
}

/// Deterministic, incompressible-looking test data (xorshift), the same for the same
/// size on every machine.
struct TestData {
    state: u64,
    left: u64,
}

impl Read for TestData {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = (buf.len() as u64).min(self.left) as usize;
        for chunk in buf[..n].chunks_mut(8) {
            self.state ^= self.state << 13;
            self.state ^= self.state >> 7;
            self.state ^= self.state << 17;
            let bytes = self.state.to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// `flowlab fragments make --size S --count N --out DIR`: test data without an input.
pub fn make(size: u64, count: usize, out: &Path) -> Result<Manifest, ManifestError> {
    let data = TestData {
        state: 0x9E37_79B9_7F4A_7C15,
        left: size,
    };
    write_fragments(data, "testdata.bin", size, count, out)
}

/// Hashes a file.
pub fn hash_file(path: &Path) -> io::Result<[u8; 32]> {
    let mut h = blake3::Hasher::new();
    let mut f = File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(*h.finalize().as_bytes())
}

/// What is wrong with fragment `f`.
fn fragment_problem(f: &FragmentEntry, problem: impl Into<String>) -> ManifestError {
    ManifestError::Fragment {
        name: f.name.clone(),
        problem: problem.into(),
    }
}

/// Whether fragment `f`'s file at `path` is a regular file (not a link to one) of its
/// size.
fn check_file(path: &Path, f: &FragmentEntry) -> Result<(), ManifestError> {
    let meta = fs::symlink_metadata(path).map_err(|e| fragment_problem(f, e.to_string()))?;
    if !meta.is_file() {
        return Err(fragment_problem(f, "not a regular file"));
    }
    if meta.len() != f.size {
        return Err(fragment_problem(
            f,
            format!("{} bytes, expected {}", meta.len(), f.size),
        ));
    }
    Ok(())
}

/// Checks one fragment file against its entry.
pub fn verify_fragment(dir: &Path, f: &FragmentEntry) -> Result<(), ManifestError> {
    let path = dir.join(&f.name);
    check_file(&path, f)?;
    let got = hash_file(&path).map_err(|e| fragment_problem(f, e.to_string()))?;
    if Some(got) != hex32(&f.blake3) {
        return Err(fragment_problem(f, "content does not match its hash"));
    }
    Ok(())
}

/// `flowlab fragments join DIR --out FILE`: checks every fragment, concatenates them, and
/// checks the whole, reading each fragment once (its own hash and the whole file's are
/// taken from the same bytes as they are written). On any mismatch nothing is left at
/// `out`.
pub fn join(dir: &Path, out: &Path) -> Result<Manifest, ManifestError> {
    let m = Manifest::load(dir)?;
    // Every fragment is there, a regular file of its size, before anything is written
    // (its content is checked as it is copied).
    for f in &m.fragments {
        check_file(&dir.join(&f.name), f)?;
    }
    // A hidden name beside the output, so neither it nor a neighbour is overwritten.
    let tmp = out.with_file_name(format!(
        ".{}.partial",
        out.file_name()
            .map_or("joined".into(), |n| n.to_string_lossy())
    ));
    let result = (|| {
        let mut w = BufWriter::new(File::create(&tmp).map_err(io_err(out))?);
        let mut whole = blake3::Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        for f in &m.fragments {
            let problem = |p: String| fragment_problem(f, p);
            let path = dir.join(&f.name);
            let mut r = File::open(&path).map_err(|e| problem(e.to_string()))?;
            let mut own = blake3::Hasher::new();
            let mut read = 0u64;
            loop {
                let n = r.read(&mut buf).map_err(|e| problem(e.to_string()))?;
                if n == 0 {
                    break;
                }
                read += n as u64;
                own.update(&buf[..n]);
                whole.update(&buf[..n]);
                w.write_all(&buf[..n]).map_err(io_err(&tmp))?;
            }
            if read != f.size {
                return Err(problem(format!("{read} bytes, expected {}", f.size)));
            }
            if Some(*own.finalize().as_bytes()) != hex32(&f.blake3) {
                return Err(problem("content does not match its hash".into()));
            }
        }
        w.flush().map_err(io_err(&tmp))?;
        let got = whole.finalize().to_hex().to_string();
        if got != m.file.blake3 {
            return Err(ManifestError::WholeFile {
                got,
                want: m.file.blake3.clone(),
            });
        }
        fs::rename(&tmp, out).map_err(io_err(out))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map(|()| m)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A FIFO in the manifest's place (the served directory writable by someone else)
    /// would have hung `serve --fragments` as it started: it is refused at once.
    #[test]
    fn a_fifo_in_the_manifests_place_is_refused_not_waited_on() {
        let dir = tempfile::tempdir().expect("tmp");
        let fifo = dir.path().join(MANIFEST);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))
            .expect("mkfifo");
        let e = Manifest::load(dir.path()).expect_err("a FIFO");
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }

    #[test]
    fn sizes_differ_by_at_most_one_byte() {
        assert_eq!(fragment_sizes(10, 3).unwrap(), [4, 3, 3]);
        assert_eq!(fragment_sizes(9, 3).unwrap(), [3, 3, 3]);
        assert_eq!(fragment_sizes(10, 6).unwrap(), [2, 2, 2, 2, 1, 1]);
        assert_eq!(fragment_sizes(160, 160).unwrap(), vec![1; 160]);
        assert!(fragment_sizes(10, 0).is_err());
        assert!(fragment_sizes(2, 3).is_err(), "more fragments than bytes");
    }

    #[test]
    fn names_sort_in_file_order() {
        assert_eq!(fragment_name("f.bin", 7, 160), "f.bin.007");
        assert_eq!(fragment_name("f.bin", 1234, 2000), "f.bin.1234");
    }

    #[test]
    fn make_split_join_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let m = make(100_003, 7, &a).unwrap();
        assert_eq!(m.fragments.len(), 7);
        assert_eq!(Manifest::load(&a).unwrap(), m);
        let joined = dir.path().join("whole.bin");
        join(&a, &joined).unwrap();
        assert_eq!(fs::metadata(&joined).unwrap().len(), 100_003);
        // Splitting the joined file again gives the same hashes.
        let b = dir.path().join("b");
        let m2 = split(&joined, 7, &b).unwrap();
        assert_eq!(m2.file.blake3, m.file.blake3);
        let h: Vec<&str> = m.fragments.iter().map(|f| f.blake3.as_str()).collect();
        let h2: Vec<&str> = m2.fragments.iter().map(|f| f.blake3.as_str()).collect();
        assert_eq!(h, h2);
        // make is deterministic.
        let c = dir.path().join("c");
        assert_eq!(make(100_003, 7, &c).unwrap().file, m.file);
    }

    #[test]
    fn join_refuses_a_corrupt_fragment_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let m = make(10_000, 4, &a).unwrap();
        let victim = a.join(&m.fragments[2].name);
        let mut bytes = fs::read(&victim).unwrap();
        bytes[10] ^= 1;
        fs::write(&victim, bytes).unwrap();
        let out = dir.path().join("whole.bin");
        let err = join(&a, &out).unwrap_err();
        assert!(err.to_string().contains(&m.fragments[2].name), "{err}");
        assert!(!out.exists());
        assert!(!dir.path().join(".whole.bin.partial").exists());
    }

    /// Each fragment's SHA-256 (for pages) is its content's, as coreutils' `sha256sum`
    /// computes it; a manifest without them (an older set) is read as before, one with a
    /// malformed one is refused.
    #[test]
    fn make_writes_each_fragments_sha256_and_older_manifests_still_read() {
        let dir = tempfile::tempdir().expect("tmp");
        let m = make(10_000, 3, dir.path()).expect("make");
        for f in &m.fragments {
            let out = std::process::Command::new("sha256sum")
                .arg(dir.path().join(&f.name))
                .output()
                .expect("sha256sum");
            let text = String::from_utf8_lossy(&out.stdout);
            let want = text.split_whitespace().next().expect("a digest");
            assert_eq!(f.sha256.as_deref(), Some(want), "{}", f.name);
        }
        let loaded = Manifest::load(dir.path()).expect("load");
        assert_eq!(loaded, m, "written and read back");
        let mut older = m.clone();
        for f in &mut older.fragments {
            f.sha256 = None;
        }
        let text = serde_json::to_vec(&older).expect("JSON");
        assert!(!String::from_utf8_lossy(&text).contains("sha256"));
        assert_eq!(
            Manifest::parse(&text, Path::new("m")).expect("older"),
            older
        );
        let mut bad = m;
        bad.fragments[1].sha256 = Some("xyz".into());
        let text = serde_json::to_vec(&bad).expect("JSON");
        let e = Manifest::parse(&text, Path::new("m")).expect_err("refused");
        assert!(e.to_string().contains("sha256 is not 64 hex digits"), "{e}");
    }

    #[test]
    fn hostile_manifests_are_refused() {
        let good = br#"{"schema":"flowlab.fragments/1","file":{"name":"f","size":2,"blake3":"0000000000000000000000000000000000000000000000000000000000000000"},
            "fragments":[{"name":"f.000","size":2,"blake3":"0000000000000000000000000000000000000000000000000000000000000000"}]}"#;
        assert!(Manifest::parse(good, Path::new("m")).is_ok());
        let text = String::from_utf8(good.to_vec()).unwrap();
        for (bad_name, why) in [
            ("../../etc/passwd", "path"),
            ("/etc/passwd", "absolute"),
            ("a/b", "separator"),
            ("nul\\u0000x", "NUL"),
            ("manifest.json", "reserved"),
            (".hidden", "reserved"),
        ] {
            let t = text.replace("\"f.000\"", &format!("\"{bad_name}\""));
            assert!(
                Manifest::parse(t.as_bytes(), Path::new("m")).is_err(),
                "{why}"
            );
        }
        let wrong_total = text.replace("\"f\",\"size\":2", "\"f\",\"size\":3");
        assert!(Manifest::parse(wrong_total.as_bytes(), Path::new("m")).is_err());
        let twice = text.replace(
            "\"fragments\":[",
            "\"fragments\":[{\"name\":\"f.000\",\"size\":0,\"blake3\":\"0000000000000000000000000000000000000000000000000000000000000000\"},",
        );
        assert!(Manifest::parse(twice.as_bytes(), Path::new("m")).is_err());
        assert!(Manifest::parse(b"{}", Path::new("m")).is_err());
        // Hashes are lower-case hex, as written: upper case or a sign is refused.
        let zeros = "0".repeat(64);
        for bad in [zeros.replacen('0', "A", 1), zeros.replacen('0', "+", 1)] {
            let t = text.replacen(&zeros, &bad, 1);
            assert!(
                Manifest::parse(t.as_bytes(), Path::new("m")).is_err(),
                "{bad}"
            );
        }
    }
}
