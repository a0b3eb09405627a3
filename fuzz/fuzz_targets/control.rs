//! The control connection: a frame's length prefix, its JSON body as each message type
//! (parameters, results, a hello), the cookie and the state bytes. Whatever decodes must
//! encode and decode to the same value.
#![no_main]

use flowlab_proto::frame::{self, MAX_PARAMS_LEN, MAX_RESULTS_LEN};
use flowlab_proto::hello::ServerHello;
use flowlab_proto::params::TestParams;
use flowlab_proto::results::PeerResults;
use flowlab_proto::{Cookie, State};
use libfuzzer_sys::fuzz_target;

fn round_trips<T>(body: &[u8])
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    if let Ok(v) = frame::decode::<T>(body) {
        let wire = frame::encode(&v);
        assert_eq!(frame::decode::<T>(&wire[4..]).ok(), Some(v));
    }
}

fuzz_target!(|data: &[u8]| {
    if let Some(prefix) = data.get(..4) {
        let prefix: [u8; 4] = prefix.try_into().expect("four bytes");
        for max in [MAX_PARAMS_LEN, MAX_RESULTS_LEN] {
            if let Ok(n) = frame::check(prefix, max) {
                assert!(n >= 1 && n as u64 <= u64::from(max));
            }
        }
    }
    round_trips::<TestParams>(data);
    round_trips::<PeerResults>(data);
    round_trips::<ServerHello>(data);
    if let Some(wire) = data.get(..37) {
        let wire: [u8; 37] = wire.try_into().expect("37 bytes");
        if let Ok(c) = Cookie::decode(&wire) {
            assert_eq!(c.encode(), wire);
        }
    }
    if let Some(&b) = data.first() {
        if let Ok(s) = State::from_byte(b) {
            assert_eq!(s.to_byte(), b);
        }
    }
});
