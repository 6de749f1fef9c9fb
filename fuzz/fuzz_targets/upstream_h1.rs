//! The gateway's HTTP/1.1 client side: a backend's response head and chunked bodies, in any
//! cut, are parsed or refused, and never read past what they frame.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (&[u8], bool, u16)| {
    let (bytes, head_request, cut) = input;
    turnpike_engine::fuzzing::response_head(bytes, head_request);
    turnpike_engine::fuzzing::chunked_body(bytes, usize::from(cut));
});
