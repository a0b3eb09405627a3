//! The server's TCP echo (`flowlab ping --tcp`, `--connect`): a connection that opens
//! with [`probe::TCP_MAGIC`] gets its messages echoed, one at a time, at the size its
//! hello asked for; a message that is a probe request gets the server's times filled in.
//! A server that authenticates admits only a connection whose hello carries a valid
//! credential (a token or a ticket).

use crate::cpu;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};

use flowlab_proto::credential::ticket_reply;
use flowlab_proto::fragment::Admission;
use flowlab_proto::probe::{self, TCP_HELLO_LEN};
use flowlab_results::server::RefusalKind;

use super::auth::{ServerAuth, Unadmitted, admit, ticket_due};
use super::{Greeting, Places};
use crate::{control, sock};

/// TCP echo connections served at once, in all and from one source.
pub(super) fn places() -> Places {
    Places::new(
        64,
        16,
        "TCP echo connections",
        [
            "the server's limit of 64",
            "the server's limit of 16 per address",
        ],
    )
}

/// Serves one TCP echo connection until the client closes it or stays silent for the
/// idle timeout.
pub(super) fn serve(
    mut conn: TcpStream,
    peer: SocketAddr,
    mut greeting: Greeting,
    places: &Places,
    auth: Option<&ServerAuth>,
    idle: std::time::Duration,
) {
    let mut hello = [0u8; TCP_HELLO_LEN];
    let (size, follows) = match control::read_exact_by(&mut conn, &mut hello, greeting.deadline)
        .map_err(|e| e.to_string())
        .and_then(|()| probe::tcp_hello_size(&hello).map_err(|e| e.to_string()))
    {
        Ok(hello) => hello,
        Err(e) => {
            return greeting.refuse(
                peer,
                RefusalKind::Handshake,
                format!("TCP probe hello: {e}"),
            );
        }
    };
    let token_accepted = match admit(&mut conn, greeting.deadline, follows, auth, peer) {
        Ok(accepted) => accepted,
        Err(Unadmitted::Unreadable(e)) => {
            return greeting.refuse(
                peer,
                RefusalKind::Credentials,
                format!("TCP probe credential: {e}"),
            );
        }
        Err(Unadmitted::Refused(why)) => {
            return greeting.deny(&mut conn, peer, format!("TCP echo: {why}"));
        }
    };
    let _place = match places.take(peer.ip()) {
        Ok(p) => p,
        Err(why) => return greeting.turn_away(&mut conn, peer, why),
    };
    greeting.done();
    let ticket = ticket_due(token_accepted, auth, peer);
    // Each reply leaves at once (no Nagle wait for the previous one's ACK).
    let _ = conn.set_nodelay(true);
    let _ = conn.set_read_timeout(Some(idle));
    let _ = conn.set_write_timeout(Some(idle));
    if conn.write_all(&Admission::Welcome.encode()).is_err() {
        return;
    }
    if follows && conn.write_all(&ticket_reply(ticket.as_ref())).is_err() {
        return;
    }
    let mut message = vec![0u8; size];
    // A request's receive time is the kernel's arrival stamp of its last segment, so the
    // time this thread takes to wake is part of the server's time, which the client
    // subtracts.
    sock::enable_rx_timestamps(&conn);
    // Until the client closes, stops, or stays silent for the idle timeout.
    while let Ok(stamped) = sock::read_exact_stamped(&conn, &mut message, std::time::Duration::ZERO)
    {
        let received_ns = stamped.at_ns;
        if probe::has_request_header(&message) {
            probe::answer_in_place(&mut message, received_ns, cpu::unix_now_ns());
        }
        if conn.write_all(&message).is_err() {
            return;
        }
    }
}
