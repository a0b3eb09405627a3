//! The fragment protocol's byte stream, as a server reads requests and a client reads
//! replies: the input is cut into pieces (at the positions its first byte picks) and
//! pushed piece by piece, as TCP may deliver it.
#![no_main]

use flowlab_proto::fragment::Decoder;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&step, stream)) = data.split_first() else {
        return;
    };
    let step = usize::from(step).max(1);
    let (mut requests, mut replies) = (Decoder::default(), Decoder::default());
    for piece in stream.chunks(step) {
        requests.push(piece);
        replies.push(piece);
        while let Ok(Some(_)) = requests.next_request() {}
        while let Ok(Some(_)) = replies.next_reply() {}
        let _ = replies.take(usize::from(piece[0]));
    }
});
