//! Bytes from a peer on a load connection (`flowlab rpm`) or a probe: the hello and the
//! credential after it are judged without panicking; the frame reader takes any bytes
//! in any pieces without panicking, and reads the same events however the bytes are
//! split; a probe reply decodes or is refused.
#![no_main]

use flowlab_proto::credential::Credential;
use flowlab_proto::load::{Event, FrameReader, HELLO_LEN, check_congestion, hello_head};
use flowlab_proto::probe::Reply;
use libfuzzer_sys::fuzz_target;

fn events(data: &[u8], piece: usize) -> (Vec<Event>, bool) {
    let mut r = FrameReader::default();
    let mut out = Vec::new();
    let mut data_bytes = 0;
    for chunk in data.chunks(piece.max(1)) {
        let pushed = r.push(chunk, &mut |e| match e {
            Event::Data(n) => data_bytes += n,
            e => out.push(e),
        });
        if pushed.is_err() {
            out.push(Event::Data(data_bytes));
            return (out, false);
        }
    }
    out.push(Event::Data(data_bytes));
    (out, true)
}

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = <[u8; HELLO_LEN]>::try_from(&data[..HELLO_LEN.min(data.len())]) {
        if let Ok(head) = hello_head(&h) {
            let end = (HELLO_LEN + head.name_len).min(data.len());
            let _ = check_congestion(&data[HELLO_LEN..end]);
            if head.credential {
                // The credential, read as the server reads it: each piece asked for in
                // turn, refused before its body when its length is out of range.
                if let Some(Ok((c, used))) = Credential::decode(&data[end..]) {
                    let again = c.encode().expect("what was read encodes");
                    assert_eq!(&data[end..end + used], &again[..]);
                }
            }
        }
    }
    let _ = Reply::decode(data);
    let whole = events(data, data.len());
    let split = events(data, 1 + data.first().copied().unwrap_or(0) as usize % 7);
    assert_eq!(whole, split);
});
