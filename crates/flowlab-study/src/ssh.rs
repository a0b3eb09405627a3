//! An `[ssh]` table: how each host a file names is reached over SSH. Studies and meshes
//! both take one, in the same shape:
//!
//! ```toml
//! ssh_options = ["-i", "/etc/flowlab/lab_key"]   # more of ssh's options, for all
//! [ssh]
//! h1 = "ssh://lab@h1.example"
//! h4 = { url = "ssh://lab@h4.example:2222", address = "192.0.2.4", flowlab = "/opt/flowlab" }
//! ```

use std::collections::BTreeMap;
use std::ops::Range;

use toml::Spanned;

/// The `[ssh]` table as the TOML reader gives it (every key and value spanned).
pub type RawTable = Spanned<BTreeMap<Spanned<String>, Spanned<toml::Value>>>;

/// A host reached over SSH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshHost {
    /// `ssh://[USER@]HOST[:PORT]`.
    pub url: String,
    /// What the other hosts reach it at; `None`: the URL's host.
    pub address: Option<String>,
    /// The flowlab to run there; `None`: `flowlab`, as its `PATH` finds it.
    pub flowlab: Option<String>,
}

/// Reads `table`: an entry for each of `names` (`noun`s: "host", "node"), in their
/// order, and none for anything else (`among` says what the names are, for the
/// refusal). Errors are made by `at` from a span and a message.
pub fn hosts<E>(
    table: &RawTable,
    names: &[String],
    noun: &str,
    among: &str,
    at: &dyn Fn(Range<usize>, String) -> E,
) -> Result<Vec<SshHost>, E> {
    let entries = table.get_ref();
    for name in entries.keys() {
        if !names.contains(name.get_ref()) {
            return Err(at(
                name.span(),
                format!(
                    "[ssh] {}: not {among} ({})",
                    name.get_ref(),
                    if names.is_empty() {
                        "none".to_string()
                    } else {
                        names.join(", ")
                    }
                ),
            ));
        }
    }
    let mut out = Vec::new();
    for host in names {
        let Some((name, value)) = entries.iter().find(|(n, _)| n.get_ref() == host) else {
            return Err(at(
                table.span(),
                format!("[ssh]: {noun} '{host}' has no address ({host} = \"ssh://user@host\")"),
            ));
        };
        let text = |v: Option<&toml::Value>, key: &str| -> Result<Option<String>, E> {
            match v {
                None => Ok(None),
                Some(toml::Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
                Some(_) => Err(at(
                    value.span(),
                    format!("[ssh] {host}: {key} is a non-empty string"),
                )),
            }
        };
        let entry = match value.get_ref() {
            toml::Value::String(url) => SshHost {
                url: url.clone(),
                address: None,
                flowlab: None,
            },
            toml::Value::Table(t) => {
                if let Some(k) = t
                    .keys()
                    .find(|k| !["url", "address", "flowlab"].contains(&k.as_str()))
                {
                    return Err(at(
                        value.span(),
                        format!("[ssh] {host}: unknown key '{k}' (url, address, flowlab)"),
                    ));
                }
                SshHost {
                    url: text(t.get("url"), "url")?.ok_or_else(|| {
                        at(
                            value.span(),
                            format!("[ssh] {host}: no url (\"ssh://user@host\")"),
                        )
                    })?,
                    address: text(t.get("address"), "address")?,
                    flowlab: text(t.get("flowlab"), "flowlab")?,
                }
            }
            _ => {
                return Err(at(
                    value.span(),
                    format!(
                        "[ssh] {}: \"ssh://user@host\", or {{ url = …, address = …, flowlab = … }}",
                        name.get_ref()
                    ),
                ));
            }
        };
        if !entry.url.starts_with("ssh://") {
            return Err(at(
                value.span(),
                format!("[ssh] {host}: '{}' is not an ssh:// address", entry.url),
            ));
        }
        out.push(entry);
    }
    Ok(out)
}

/// `ssh_options`, which only hosts over SSH take (`hosts`: the file has some); none when
/// not given.
pub fn options<E>(
    raw: Option<&Spanned<Vec<String>>>,
    hosts: bool,
    at: &dyn Fn(Range<usize>, String) -> E,
) -> Result<Vec<String>, E> {
    match raw {
        Some(o) if !hosts => Err(at(
            o.span(),
            "ssh_options: for hosts over SSH ([ssh])".into(),
        )),
        o => Ok(o.map(|o| o.get_ref().clone()).unwrap_or_default()),
    }
}
