//! Property tests: every decoder takes arbitrary bytes from a peer and answers with a
//! value or a `ProtoError` — never a panic — and what flowlab encodes decodes back to
//! the same value. proptest generates (and on failure shrinks) thousands of inputs per
//! run; this is the fuzzing that runs in CI.

use flowlab_proto::fragment::{
    Admission, Decoder, HELLO_HEAD, MAX_TOKEN_LEN, Reply, Request, hello, hello_token_len,
};
use flowlab_proto::frame::{self, MAX_PARAMS_LEN, MAX_RESULTS_LEN};
use flowlab_proto::hello::ServerHello;
use flowlab_proto::params::TestParams;
use flowlab_proto::results::PeerResults;
use flowlab_proto::udp::{self, Ack, DatagramHeader, Overflow, Progress, QueueHigh};
use flowlab_proto::{Cookie, ProtoError, State};
use proptest::prelude::*;
use serde_json::Value;

/// Arbitrary JSON documents, nested a few levels, with the numbers peers really send
/// (huge, negative, fractional, exponent forms) among them.
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 48, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..8)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Object keys: mostly the ones flowlab reads, so values of every type reach its fields.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "tcp",
            "udp",
            "time",
            "num",
            "blockcount",
            "parallel",
            "len",
            "bandwidth",
            "window",
            "omit",
            "reverse",
            "bidirectional",
            "MSS",
            "congestion",
            "flowlab",
            "version",
            "mode",
            "rto_ms",
            "require",
            "udp_backoff",
            "udp_window",
            "streams",
            "id",
            "bytes",
            "retransmits",
            "jitter",
            "errors",
            "packets",
            "cpu_util_total",
            "cpu_util_user",
            "cpu_util_system",
            "sender_has_retransmits",
            "features",
            "server_version",
            "error",
            "end_time",
        ])
        .prop_map(String::from),
        "[a-z_]{1,10}",
    ]
}

/// An object whose keys are drawn from [`key`] (a frame body must be an object).
fn json_object() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(key(), json(), 0..12)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn frame_bodies_of_random_bytes_are_judged_not_panicked_on(body in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = frame::decode::<TestParams>(&body);
        let _ = frame::decode::<PeerResults>(&body);
        let _ = frame::decode::<ServerHello>(&body);
    }

    #[test]
    fn json_objects_of_any_shape_are_judged_not_panicked_on(v in json_object()) {
        let body = serde_json::to_vec(&v).expect("serializable");
        let params = frame::decode::<TestParams>(&body);
        let _ = frame::decode::<PeerResults>(&body);
        let _ = frame::decode::<ServerHello>(&body);
        // Whatever parses must also re-encode and parse to the same parameters.
        if let Ok(p) = params {
            let again = frame::encode(&p);
            prop_assert_eq!(frame::decode::<TestParams>(&again[4..]), Ok(p));
        }
    }

    #[test]
    fn non_objects_are_refused(v in json().prop_filter("not an object", |v| !v.is_object())) {
        let body = serde_json::to_vec(&v).expect("serializable");
        let refused = matches!(frame::decode::<TestParams>(&body), Err(ProtoError::BadJson(_)));
        prop_assert!(refused);
    }

    #[test]
    fn frame_lengths_are_bounded(prefix in any::<[u8; 4]>()) {
        for max in [MAX_PARAMS_LEN, MAX_RESULTS_LEN] {
            let len = u32::from_be_bytes(prefix);
            match frame::check(prefix, max) {
                Ok(n) => prop_assert!(n >= 1 && n as u64 <= u64::from(max) && n as u32 == len),
                Err(e) => prop_assert_eq!(e, ProtoError::BadLength { len, max }),
            }
        }
    }

    #[test]
    fn cookies_decode_only_when_valid_and_round_trip(wire in any::<[u8; 37]>()) {
        if let Ok(c) = Cookie::decode(&wire) {
            prop_assert_eq!(c.encode(), wire);
            prop_assert_eq!(wire[36], 0);
        }
    }

    #[test]
    fn random_cookies_round_trip(random in any::<[u8; 36]>()) {
        let c = Cookie::from_random(random);
        prop_assert_eq!(Cookie::decode(&c.encode()), Ok(c));
    }

    #[test]
    fn state_bytes_round_trip_when_known(b in any::<u8>()) {
        if let Ok(s) = State::from_byte(b) {
            prop_assert_eq!(s.to_byte(), b);
        }
    }

    #[test]
    fn datagram_headers_need_their_length_and_round_trip(
        buf in prop::collection::vec(any::<u8>(), 0..40),
        wide in any::<bool>(),
        sec in any::<u32>(), usec in 0u32..1_000_000, seq in any::<u64>(),
    ) {
        let need = DatagramHeader::len(wide);
        prop_assert_eq!(DatagramHeader::decode(&buf, wide).is_ok(), buf.len() >= need);
        let h = DatagramHeader { sec, usec, seq: if wide { seq } else { seq & 0xFFFF_FFFF } };
        let mut out = vec![0u8; need];
        h.encode(&mut out, wide);
        prop_assert_eq!(DatagramHeader::decode(&out, wide), Ok(h));
    }

    #[test]
    fn small_udp_messages_are_told_apart(
        mut buf in prop::collection::vec(any::<u8>(), 0..48),
        magic in prop::sample::select(vec![
            &b""[..], b"FLAK", b"FLOV", b"FLQH", b"FLRP", b"FLPR\x01", b"FLPQ\x01",
        ]),
        len in prop::sample::select(vec![None, Some(Ack::LEN), Some(Overflow::LEN), Some(Progress::LEN), Some(flowlab_proto::probe::HEADER_LEN)]),
    ) {
        // Most inputs carry a magic, many at the length that goes with it, so the
        // accepting paths run too: a report is never read as another, nor as a probe.
        if let Some(len) = len {
            buf.resize(len, 0);
        }
        let n = magic.len().min(buf.len());
        buf[..n].copy_from_slice(&magic[..n]);
        let ack = Ack::decode(&buf).is_ok();
        let overflow = Overflow::decode(&buf).is_ok();
        let queue = QueueHigh::decode(&buf).is_ok();
        let progress = Progress::decode(&buf).is_ok();
        let handshake = udp::handshake_reply(&buf).is_some();
        let probe_reply = flowlab_proto::probe::Reply::decode(&buf).is_ok();
        let probe_request = flowlab_proto::probe::is_request(&buf);
        // At most one reading of any datagram.
        let readings = [ack, overflow, queue, progress, handshake, probe_reply, probe_request];
        prop_assert!(readings.iter().filter(|&&r| r).count() <= 1, "{:?}", readings);
        prop_assert_eq!(ack, buf.len() == Ack::LEN && buf.starts_with(b"FLAK"));
        prop_assert_eq!(overflow, buf.len() == Overflow::LEN && buf.starts_with(b"FLOV"));
        prop_assert_eq!(queue, buf.len() == QueueHigh::LEN && buf.starts_with(b"FLQH"));
        prop_assert_eq!(progress, buf.len() == Progress::LEN && buf.starts_with(b"FLRP"));
    }

    #[test]
    fn progress_reports_round_trip(seq: u64, sent_us: u64, held_us: u64, window: u64) {
        let p = Progress { seq, sent_us, held_us, window };
        prop_assert_eq!(Progress::decode(&p.encode()), Ok(p));
    }

    #[test]
    fn fragment_messages_of_random_bytes_are_judged_not_panicked_on(
        bytes in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut d = Decoder::default();
        d.push(&bytes);
        while let Ok(Some(_)) = d.next_request() {}
        let mut d = Decoder::default();
        d.push(&bytes);
        while let Ok(Some(r)) = d.next_reply() {
            if let Reply::Fragment { size, .. } = r {
                d.take(size.min(1 << 16) as usize);
            }
        }
        let mut d = Decoder::default();
        d.push(&bytes);
        if let Ok(Some(Admission::Busy(m))) = d.next_admission() {
            prop_assert!(m.len() <= 3 * 1024, "a message is at most 1024 bytes (lossy UTF-8)");
        }
        if let Some(head) = bytes.first_chunk::<HELLO_HEAD>() {
            if let Ok(len) = hello_token_len(head) {
                prop_assert!(len <= MAX_TOKEN_LEN);
                prop_assert!(bytes.starts_with(b"FLFR\x02"));
            }
        }
    }

    #[test]
    fn load_frames_of_random_bytes_read_the_same_in_any_pieces(
        mut bytes in prop::collection::vec(any::<u8>(), 0..400),
        kind in prop::sample::select(vec![b'D', b'P', b'X']),
        piece in 1usize..64,
    ) {
        use flowlab_proto::load::{Event, FrameReader};
        // Most inputs start like a frame, so the accepting paths run too.
        if bytes.len() >= 5 {
            bytes[0] = kind;
            bytes[1..4].fill(0);
        }
        let read = |piece: usize| {
            let mut r = FrameReader::default();
            let (mut data, mut probes, mut ok) = (0usize, Vec::new(), true);
            for chunk in bytes.chunks(piece) {
                if r.push(chunk, &mut |e| match e {
                    Event::Data(n) => data += n,
                    Event::Probe(p) => probes.push(p),
                }).is_err() {
                    ok = false;
                    break;
                }
            }
            (data, probes, ok)
        };
        let whole = read(bytes.len().max(1));
        prop_assert_eq!(&read(piece), &whole);
        prop_assert!(whole.0 <= bytes.len());
    }

    #[test]
    fn probes_of_random_bytes_are_judged_not_panicked_on(
        mut bytes in prop::collection::vec(any::<u8>(), 0..200),
        magic in prop::sample::select(vec![&b""[..], b"FLPQ\x01", b"FLPR\x01", b"FLPR\x02"]),
    ) {
        // Most inputs start like a request or a reply, so the accepting paths run too.
        let n = magic.len().min(bytes.len());
        bytes[..n].copy_from_slice(&magic[..n]);
        let request = flowlab_proto::probe::is_request(&bytes);
        if request {
            prop_assert!(bytes.len() >= flowlab_proto::probe::HEADER_LEN);
            prop_assert!(bytes.starts_with(b"FLPQ\x01"));
            let mut reply = bytes.clone();
            flowlab_proto::probe::answer_in_place(&mut reply, 5, 9);
            let r = flowlab_proto::probe::Reply::decode(&reply).expect("an answered request is a reply");
            prop_assert_eq!((r.server_rx_ns, r.server_tx_ns, reply.len()), (5, 9, bytes.len()));
        }
        if let Ok(r) = flowlab_proto::probe::Reply::decode(&bytes) {
            prop_assert!(!request && bytes.starts_with(b"FLPR"));
            prop_assert!(r.server_ns() <= r.server_tx_ns);
        }
    }

    #[test]
    fn credentials_of_random_bytes_are_judged_not_panicked_on(
        mut bytes in prop::collection::vec(any::<u8>(), 0..300),
        kind in prop::sample::select(vec![b'N', b'T', b'K', b'X']),
    ) {
        // Most inputs start with a known kind, so the accepting paths run too.
        if let Some(first) = bytes.first_mut() {
            *first = kind;
        }
        // What reads whole is what its bytes say, byte for byte.
        if let Some(Ok((c, used))) = flowlab_proto::credential::Credential::decode(&bytes) {
            let again = c.encode().expect("what was read encodes");
            prop_assert_eq!(&bytes[..used], &again[..]);
        }
    }

    #[test]
    fn hellos_round_trip(token in prop::collection::vec(any::<u8>(), 0..=MAX_TOKEN_LEN)) {
        let h = hello(&token);
        let head = h.first_chunk::<HELLO_HEAD>().expect("a whole head");
        prop_assert_eq!(hello_token_len(head), Ok(token.len()));
        prop_assert_eq!(&h[HELLO_HEAD..], &token[..]);
    }

    #[test]
    fn fragment_requests_round_trip(name in "[a-zA-Z0-9._-]{1,255}", get in any::<bool>()) {
        let r = if get { Request::Get(name) } else { Request::Cancel(name) };
        let mut d = Decoder::default();
        d.push(&r.encode());
        prop_assert_eq!(d.next_request(), Ok(Some(r)));
    }

    #[test]
    fn acks_and_overflow_reports_round_trip(a in any::<u64>(), b in any::<u64>()) {
        prop_assert_eq!(Ack::decode(&Ack { seq: a }.encode()), Ok(Ack { seq: a }));
        let o = Overflow { drops: a, seq: b };
        prop_assert_eq!(Overflow::decode(&o.encode()), Ok(o));
    }
}
