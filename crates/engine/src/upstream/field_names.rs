//! Response field names as backends commonly spell them, recognised without the general
//! parser's pass.
//!
//! `HeaderName::from_bytes` lowercases a name into a scratch buffer, validates it and looks it
//! up among the standard names: about 120 instructions per field. A backend's response repeats
//! the same few fields with the same spelling, either capitalised (`Content-Type`) or lowercase;
//! [`common`] matches those spellings exactly (a comparison by length, then by bytes) and leaves
//! every other spelling and name to `HeaderName::from_bytes`.

use http::header::{self, HeaderName};

/// The name `raw` spells, when it is one of the common fields in its capitalised or lowercase
/// spelling. Runs for each field of each backend response; `None` means "ask the general
/// parser", never "invalid".
pub fn common(raw: &[u8]) -> Option<HeaderName> {
    Some(match raw {
        b"Server" | b"server" => header::SERVER,
        b"Date" | b"date" => header::DATE,
        b"Content-Type" | b"content-type" => header::CONTENT_TYPE,
        b"Content-Length" | b"content-length" => header::CONTENT_LENGTH,
        b"Connection" | b"connection" => header::CONNECTION,
        b"Transfer-Encoding" | b"transfer-encoding" => header::TRANSFER_ENCODING,
        b"Content-Encoding" | b"content-encoding" => header::CONTENT_ENCODING,
        b"Cache-Control" | b"cache-control" => header::CACHE_CONTROL,
        b"ETag" | b"Etag" | b"etag" => header::ETAG,
        b"Last-Modified" | b"last-modified" => header::LAST_MODIFIED,
        b"Expires" | b"expires" => header::EXPIRES,
        b"Vary" | b"vary" => header::VARY,
        b"Accept-Ranges" | b"accept-ranges" => header::ACCEPT_RANGES,
        b"Location" | b"location" => header::LOCATION,
        b"Set-Cookie" | b"set-cookie" => header::SET_COOKIE,
        b"Access-Control-Allow-Origin" | b"access-control-allow-origin" => {
            header::ACCESS_CONTROL_ALLOW_ORIGIN
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SPELLINGS: &[&str] = &[
        "Server",
        "Date",
        "Content-Type",
        "Content-Length",
        "Connection",
        "Transfer-Encoding",
        "Content-Encoding",
        "Cache-Control",
        "ETag",
        "Etag",
        "Last-Modified",
        "Expires",
        "Vary",
        "Accept-Ranges",
        "Location",
        "Set-Cookie",
        "Access-Control-Allow-Origin",
    ];

    #[test]
    fn knows_both_spellings_of_every_listed_field() {
        for s in SPELLINGS {
            for raw in [s.to_string(), s.to_ascii_lowercase()] {
                let general = HeaderName::from_bytes(raw.as_bytes()).unwrap();
                assert_eq!(common(raw.as_bytes()), Some(general), "{raw}");
            }
        }
    }

    #[test]
    fn leaves_other_spellings_to_the_general_parser() {
        for raw in [
            "CONTENT-TYPE",
            "Content-type",
            "X-Request-Id",
            "Date ",
            "",
            "Dat",
        ] {
            assert_eq!(common(raw.as_bytes()), None, "{raw}");
        }
    }

    proptest! {
        /// Whatever it recognises, the general parser reads the same way.
        #[test]
        fn agrees_with_the_general_parser(
            raw in prop_oneof![
                proptest::sample::select(SPELLINGS).prop_flat_map(|s| {
                    proptest::collection::vec(any::<bool>(), s.len()).prop_map(move |upper| {
                        s.bytes()
                            .zip(upper)
                            .map(|(b, u)| if u { b.to_ascii_uppercase() } else { b.to_ascii_lowercase() })
                            .collect::<Vec<u8>>()
                    })
                }),
                proptest::collection::vec(any::<u8>(), 0..32),
            ]
        ) {
            if let Some(name) = common(&raw) {
                prop_assert_eq!(Some(name), HeaderName::from_bytes(&raw).ok());
            }
        }
    }
}
