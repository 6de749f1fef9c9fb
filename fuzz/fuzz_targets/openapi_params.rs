//! OpenAPI request parsing: query strings, cookies, media type parameters and multipart
//! bodies.
#![no_main]
use libfuzzer_sys::fuzz_target;
use turnpike_openapi::{multipart, params};

fuzz_target!(|input: (&str, &str, &[u8])| {
    let (text, name, body) = input;
    let _ = params::parse_query(text);
    let _ = params::cookie(text, name);
    let _ = multipart::parameters(text);
    if let Ok(boundary) = multipart::boundary(text) {
        if let Ok(parts) = multipart::parse(body, &boundary) {
            for p in parts {
                assert!(p.body.len() <= body.len());
            }
        }
    }
});
