//! `flowlab serve`'s log lines.

use flowlab_results::server::ServerEvent;

/// `flowlab serve`'s log line for `event` (no newline).
/// `events` as a text log prints them, a line each.
pub fn server_events(events: &[ServerEvent]) -> String {
    events.iter().map(|e| server_event(e) + "\n").collect()
}

pub fn server_event(event: &ServerEvent) -> String {
    match event {
        ServerEvent::Listening { address, .. } => {
            format!("flowlab server listening on {address} (TCP and UDP)")
        }
        // A QUIC connection's streams come and go: it is logged as a test of its own.
        ServerEvent::TestStarted {
            test,
            peer,
            protocol,
            client,
            ..
        } if protocol == "quic" => format!(
            "test {test}: QUIC connection from {peer} [{}]",
            client.as_deref().unwrap_or("unknown client")
        ),
        ServerEvent::TestStarted {
            test,
            peer,
            protocol,
            streams,
            reverse,
            bidir,
            client,
            multicast,
        } => format!(
            "test {test}: {protocol} from {peer}, {streams} stream(s){}{}{} [{}]",
            if *reverse { ", reverse" } else { "" },
            if *bidir { ", bidirectional" } else { "" },
            match multicast {
                Some(g) => format!(", to multicast group {g}"),
                None => String::new(),
            },
            client.as_deref().unwrap_or("unknown client")
        ),
        ServerEvent::TestFinished {
            test,
            peer,
            bytes_received,
            bytes_sent,
            seconds,
            mptcp_subflows,
        } => format!(
            "test {test}: done with {peer} after {seconds:.2} s: received {bytes_received} B, sent {bytes_sent} B{}",
            match mptcp_subflows {
                Some(n) => format!(
                    " over MPTCP ({n} subflow{})",
                    if *n == 1 { "" } else { "s" }
                ),
                None => String::new(),
            }
        ),
        ServerEvent::TestFailed { test, peer, error } => match test {
            Some(t) => format!("test {t}: {peer}: {error}"),
            None => format!("{peer}: {error}"),
        },
        ServerEvent::Refused { peer, reason, .. } => format!("refused {peer}: {reason}"),
        ServerEvent::Suppressed { count } => {
            format!("{count} more refusals or failures not logged (--log-rate)")
        }
    }
}
