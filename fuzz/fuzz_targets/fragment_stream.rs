//! The fragment protocol's byte stream, as a server reads a hello and requests and a
//! client reads an admission and replies: the input is cut into pieces (at the positions its first byte picks) and
//! pushed piece by piece, as TCP may deliver it.
#![no_main]

use flowlab_proto::fragment::{Decoder, HELLO_HEAD, hello_token_len};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&step, stream)) = data.split_first() else {
        return;
    };
    let step = usize::from(step).max(1);
    if let Some(head) = stream.first_chunk::<HELLO_HEAD>() {
        let _ = hello_token_len(head);
    }
    let mut admissions = Decoder::default();
    let (mut requests, mut replies) = (Decoder::default(), Decoder::default());
    for piece in stream.chunks(step) {
        admissions.push(piece);
        while let Ok(Some(_)) = admissions.next_admission() {}
        requests.push(piece);
        replies.push(piece);
        while let Ok(Some(_)) = requests.next_request() {}
        while let Ok(Some(_)) = replies.next_reply() {}
        let _ = replies.take(usize::from(piece[0]));
    }
});
