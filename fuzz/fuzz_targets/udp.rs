//! UDP datagrams from anyone: a data datagram's header (32- and 64-bit counters), the
//! stream handshake, acknowledgements, overflow and queue reports. What decodes re-encodes to
//! the bytes it came from.
#![no_main]

use flowlab_proto::udp::{
    Ack, DatagramHeader, Overflow, QueueHigh, handshake_reply, is_handshake_reply,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for wide in [false, true] {
        let _ = DatagramHeader::decode(data, wide);
    }
    if let Ok(a) = Ack::decode(data) {
        assert_eq!(a.encode()[..], data[..Ack::LEN]);
    }
    if let Ok(o) = Overflow::decode(data) {
        assert_eq!(o.encode()[..], data[..Overflow::LEN]);
    }
    if let Ok(q) = QueueHigh::decode(data) {
        assert_eq!(q.encode()[..], data[..QueueHigh::LEN]);
    }
    let _ = handshake_reply(data);
    let _ = is_handshake_reply(data);
});
