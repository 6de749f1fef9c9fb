//! xmlProtection's one-pass checker: any bytes are accepted or refused, never expanded.
#![no_main]
use libfuzzer_sys::fuzz_target;
use turnpike_soap::protection::{check, Limits};

fuzz_target!(|input: &[u8]| {
    if let Ok(out) = check(input, &Limits::default()) {
        assert!(out.len() <= input.len(), "the checked message grew");
    }
});
