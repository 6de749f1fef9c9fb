//! jsonProtection: the quick pass only ever accepts what the full scanner accepts, with the
//! same token count; the scanner fed in chunks decides as it does fed whole.
#![no_main]
use libfuzzer_sys::fuzz_target;
use turnpike_policies::{JsonLimits, JsonScanner};

fuzz_target!(|input: (&[u8], u8, u16)| {
    let (body, depth, cut) = input;
    let mut limits = JsonLimits::default();
    limits.max_depth = u64::from(depth % 60) + 1;
    let whole = JsonScanner::check(limits, body);
    if let Some(tokens) = turnpike_policies::json_quick_pass(body, &limits) {
        let scanned = JsonScanner::tokens(limits, body);
        assert_eq!(scanned, Ok(tokens), "the quick pass accepted what the scanner does not");
    }
    let cut = usize::from(cut).min(body.len());
    let mut s = JsonScanner::new(limits);
    let chunked = s.feed(&body[..cut]).and_then(|()| s.feed(&body[cut..])).and_then(|()| s.finish());
    assert_eq!(whole.is_ok(), chunked.is_ok(), "chunks change the verdict");
});
