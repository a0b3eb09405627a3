//! Refusals of what the command line says, and the helpers that word them: [`Usage`]
//! (exit status 2, naming the flag), clap's refusal in one line, the caret under a
//! file's error, a duration flag's value; and `--trace 5ms` read as `--trace=5ms`.

/// Arguments that parse but do not go together, or a value out of range: the message
/// names the flag. Exits with status 2, as clap's own refusals do.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

impl From<&str> for Usage {
    fn from(text: &str) -> Usage {
        Usage(text.to_string())
    }
}

/// A duration flag's value, seconds as a plain number (`0.2`) or a number with a unit
/// (`200ms`), from 0 (when `zero_ok`; else above it) to `max` seconds, either way it is
/// written. A refusal names the flag, the value and both forms.
pub fn seconds(
    flag: &str,
    text: &str,
    zero_ok: bool,
    max: f64,
) -> Result<std::time::Duration, Usage> {
    let parsed = match text.parse::<f64>() {
        Ok(s) if s.is_finite() => Ok(s),
        Ok(_) => Err("not a number of seconds".to_string()),
        Err(_) => flowlab_results::units::parse_duration(text)
            .map(|d| d.as_secs_f64())
            .map_err(|e| e.to_string()),
    };
    let range = if zero_ok {
        format!("must be 0 to {max} seconds")
    } else {
        format!("must be above 0 and at most {max} seconds")
    };
    parsed
        .and_then(|s| {
            if (s > 0.0 || (zero_ok && s == 0.0)) && s <= max {
                Ok(std::time::Duration::from_secs_f64(s))
            } else {
                Err(range)
            }
        })
        .map_err(|e| Usage(format!("{flag} {text}: {e} (seconds, e.g. 0.5, or 500ms)")))
}

/// A clap refusal as one line that names the flag, not clap's whole usage block, with
/// clap's tips kept ("a similar argument exists: '--trace'"). A missing argument is
/// named with the command that needs it: `flowlab net up needs <FILE>`.
pub fn one_line(e: &clap::Error) -> String {
    if let Some(missing) = missing(e) {
        return missing;
    }
    let text = e.to_string();
    let mut lines = text.lines().map(str::trim);
    let mut message: Vec<&str> = lines
        .by_ref()
        .take_while(|l| !l.is_empty() && !l.starts_with("Usage:"))
        .collect();
    message.extend(
        lines
            .take_while(|l| !l.starts_with("Usage:"))
            .filter(|l| l.starts_with("tip:")),
    );
    message.join("; ")
}

/// `error: flowlab test needs <HOST>`, for a refusal of a missing argument.
fn missing(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::MissingRequiredArgument {
        return None;
    }
    let Some(ContextValue::Strings(names)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let command = usage_line(e).map_or_else(|| "flowlab".to_string(), |u| command_of(&u));
    Some(format!("error: {command} needs {}", names.join(" and ")))
}

/// What follows a missing argument's refusal: the command's usage and where to read
/// more, as two lines (`Usage: flowlab net up [OPTIONS] <FILE>`, `For more, try
/// 'flowlab net up --help'.`).
pub fn missing_hint(e: &clap::Error) -> Option<String> {
    if e.kind() != clap::error::ErrorKind::MissingRequiredArgument {
        return None;
    }
    let usage = usage_line(e)?;
    let command = command_of(&usage);
    Some(format!("{usage}\nFor more, try '{command} --help'."))
}

/// Clap's `Usage: flowlab test [OPTIONS] <HOST>`, uncoloured.
fn usage_line(e: &clap::Error) -> Option<String> {
    match e.get(clap::error::ContextKind::Usage)? {
        clap::error::ContextValue::StyledStr(s) => {
            Some(s.to_string().lines().next()?.trim().to_string())
        }
        _ => None,
    }
}

/// `flowlab net up` of `Usage: flowlab net up [OPTIONS] <FILE>`.
fn command_of(usage: &str) -> String {
    usage
        .trim_start_matches("Usage:")
        .split_whitespace()
        .take_while(|w| !w.starts_with(['[', '<', '-']))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Line `line` of `text` with a caret under `column` (both 1-based, the column in
/// characters), as compilers show the place at fault, to follow a one-line error:
///
/// ```text
///   |
/// 3 | [[link]]
///   | ^
/// ```
///
/// Empty when `text` has no such line.
pub fn snippet(text: &str, line: usize, column: usize) -> String {
    let Some(source) = text.lines().nth(line.saturating_sub(1)) else {
        return String::new();
    };
    let number = line.to_string();
    let gutter = " ".repeat(number.len());
    // Tabs stay tabs under the caret, so it lines up however the terminal shows them.
    let pad: String = source
        .chars()
        .take(column.saturating_sub(1))
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    format!("\n{gutter} |\n{number} | {source}\n{gutter} | {pad}^")
}

/// Flags whose value is optional (`--trace` alone samples every 10 ms) but may be given
/// as the next word as well as after `=`: `--trace 5ms` = `--trace=5ms`.
const OPTIONAL_VALUE: [&str; 2] = ["--trace", "--latency"];

/// The command line with `--trace 5ms` joined into `--trace=5ms` where the next word is
/// a duration (a host name or address never parses as one), so clap, which cannot tell
/// an optional value from the next argument, reads both spellings. Nothing after `--`
/// is touched (the command of `net exec`).
pub fn join_optional_values(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut args = args.into_iter().peekable();
    while let Some(arg) = args.next() {
        if arg == "--" {
            out.push(arg);
            out.extend(args);
            break;
        }
        let joins = OPTIONAL_VALUE.iter().any(|f| arg == *f)
            && args
                .peek()
                .and_then(|next| next.to_str())
                .is_some_and(|next| {
                    next.starts_with(|c: char| c.is_ascii_digit())
                        && flowlab_results::units::parse_duration(next).is_ok()
                });
        match args.next_if(|_| joins) {
            Some(value) => {
                let mut joined = arg;
                joined.push("=");
                joined.push(value);
                out.push(joined);
            }
            None => out.push(arg),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn an_optional_value_may_follow_as_the_next_word() {
        let joined = |a: &[&str]| join_optional_values(os(a));
        assert_eq!(
            joined(&["flowlab", "test", "--trace", "5ms", "h"]),
            os(&["flowlab", "test", "--trace=5ms", "h"])
        );
        assert_eq!(
            joined(&["flowlab", "test", "h", "--latency", "1ms"]),
            os(&["flowlab", "test", "h", "--latency=1ms"])
        );
        // The next word is the host, a flag or nothing: the flag keeps its default.
        for line in [
            &["flowlab", "test", "--trace", "10.0.0.1"][..],
            &["flowlab", "test", "--trace", "-t", "1", "h"],
            &["flowlab", "test", "h", "--trace"],
            &["flowlab", "test", "--trace", "5g.example"],
        ] {
            assert_eq!(joined(line), os(line));
        }
        // Nothing after `--` is touched.
        let exec = ["flowlab", "net", "exec", "h1", "--", "x", "--trace", "5ms"];
        assert_eq!(joined(&exec), os(&exec));
    }

    #[test]
    fn a_snippet_puts_the_caret_under_the_column() {
        let text = "name = \"x\"\n\thosts = [\"a\" \"b\"]\n";
        assert_eq!(
            snippet(text, 2, 15),
            "\n  |\n2 | \thosts = [\"a\" \"b\"]\n  | \t             ^"
        );
        assert_eq!(snippet(text, 10, 1), "");
    }
}
