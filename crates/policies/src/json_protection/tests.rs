use proptest::prelude::*;

use super::*;

fn ok(s: &str) -> bool {
    Scanner::check(Limits::unlimited(), s.as_bytes()).is_ok()
}

fn kind(l: Limits, s: &[u8]) -> &'static str {
    Scanner::check(l, s).err().map_or("ok", |v| v.kind)
}

#[test]
fn grammar() {
    for good in [
        "0",
        "-0",
        "1.5e+3",
        "[]",
        "{}",
        " {\"a\" : [1, true, false, null, \"x\"]} ",
        "\"\\u00e9\\ud83d\\ude00\\n\"",
        "\"é😀\"",
        "[[[]]]",
        "{\"a\":{\"b\":{}}}",
    ] {
        assert!(ok(good), "{good}");
    }
    for bad in [
        "",
        "01",
        "1.",
        "-",
        "[1,]",
        "{\"a\"}",
        "{\"a\":1,}",
        "[1 2]",
        "tru",
        "nul",
        "\"\\x\"",
        "\"\\ud800\"",
        "\"\\udc00\"",
        "\"a\nb\"",
        "[]]",
        "{}{}",
        "+1",
        ".5",
        "1e",
        "{1:2}",
        "\"unterminated",
        "[",
        "\u{1}",
    ] {
        assert!(!ok(bad), "{bad:?}");
    }
    assert_eq!(kind(Limits::unlimited(), b"\"\xff\""), "invalid");
    assert_eq!(kind(Limits::unlimited(), b"\"\xed\xa0\x80\""), "invalid");
}

#[test]
fn limits_and_duplicates() {
    let d = Limits::default();
    assert_eq!(kind(d, br#"{"a":1,"b":{"a":2},"a":3}"#), "duplicateKey");
    assert_eq!(kind(d, br#"{"a":1,"\u0061":3}"#), "duplicateKey");
    assert_eq!(kind(d, br#"{"a":1,"b":{"a":2}}"#), "ok");
    let deep = format!("{}{}", "[".repeat(51), "]".repeat(51));
    assert_eq!(kind(d, deep.as_bytes()), "maxDepth");
    let l = Limits { max_tokens: 4, ..d };
    assert_eq!(kind(l, b"[1,2]"), "ok");
    assert_eq!(kind(l, b"[1,2,3]"), "maxTokens");
    let l = Limits {
        max_string_length: 3,
        max_key_length: 2,
        ..d
    };
    assert_eq!(kind(l, br#"{"ab":"abc"}"#), "ok");
    assert_eq!(
        kind(l, "{\"ab\":\"\\n\u{e9}\u{1F600}\"}".as_bytes()),
        "ok",
        "characters, not bytes"
    );
    assert_eq!(kind(l, br#"{"ab":"abcd"}"#), "maxStringLength");
    assert_eq!(kind(l, br#"{"abc":1}"#), "maxKeyLength");
    // Keys are not tokens: {"a":"b"} has 3, as in Membrane.
    let l = Limits { max_tokens: 3, ..d };
    assert_eq!(kind(l, br#"{"a":"b"}"#), "ok");
    assert_eq!(kind(l, br#"{"a":"b","c":1}"#), "maxTokens");
    assert_eq!(kind(d, br#"{"__proto__":{}}"#), "blockProto");
    let l = Limits {
        block_proto: false,
        ..d
    };
    assert_eq!(kind(l, br#"{"__proto__":{}}"#), "ok");
    let long = format!("{{\"s\":\"{}\"}}", "x".repeat(5000));
    let l = Limits {
        max_string_length: 1000,
        ..d
    };
    let v = Scanner::check(l, long.as_bytes()).unwrap_err();
    assert_eq!(
        (v.kind, v.offset),
        ("maxStringLength", 1006),
        "the first byte past the limit"
    );
    let l = Limits {
        max_object_size: 2,
        max_array_size: 2,
        ..d
    };
    assert_eq!(kind(l, br#"{"a":[1,2],"b":2}"#), "ok");
    assert_eq!(kind(l, br#"{"a":1,"b":2,"c":3}"#), "maxObjectSize");
    assert_eq!(kind(l, b"[1,2,3]"), "maxArraySize");
    let l = Limits { max_size: 3, ..d };
    assert_eq!(kind(l, b"[1]"), "ok");
    assert_eq!(kind(l, b"[12]"), "maxSize");
}

#[test]
fn hundred_thousand_nested_arrays_do_not_overflow() {
    let n = 100_000;
    let deep = format!("{}{}", "[".repeat(n), "]".repeat(n));
    let l = Limits {
        max_depth: u64::MAX,
        max_tokens: u64::MAX,
        ..Limits::default()
    };
    assert_eq!(kind(l, deep.as_bytes()), "ok");
    assert_eq!(kind(Limits::default(), deep.as_bytes()), "maxDepth");
    let v = Scanner::check(Limits::default(), deep.as_bytes()).unwrap_err();
    assert_eq!(v.offset, 50, "stops at the first violation");
}

#[test]
fn many_keys_switch_to_a_hash_set() {
    let keys: Vec<String> = (0..200)
        .map(|i| format!("\"k{i}\":{{\"k{i}\":{i}}}"))
        .collect();
    let doc = format!("{{{}}}", keys.join(","));
    assert_eq!(kind(Limits::default(), doc.as_bytes()), "ok");
    let dup = format!("{{{},\"k150\":1}}", keys.join(","));
    assert_eq!(kind(Limits::default(), dup.as_bytes()), "duplicateKey");
    let dup = format!("{{{},\"k3\":1}}", keys[..10].join(","));
    assert_eq!(kind(Limits::default(), dup.as_bytes()), "duplicateKey");
}

#[test]
fn report_error_off_hides_the_details() {
    use turnpike_config::units::Flag;
    let quiet = JsonProtection::compile(
        JsonProtectionSettings {
            report_error: Some(Flag(false)),
            ..Default::default()
        },
        &crate::testutil::plain(),
    )
    .unwrap();
    let mut i = quiet.body_inspector().unwrap();
    let p = i.chunk(br#"{"a":1,"a":2}"#).unwrap_err().to_json();
    assert_eq!(p["status"], 400);
    assert!(
        p.get("violation").is_none() && p.get("detail").is_none(),
        "{p}"
    );
    let zero = JsonProtection::compile(
        JsonProtectionSettings {
            max_depth: Some(0),
            ..Default::default()
        },
        &crate::testutil::plain(),
    );
    assert_eq!(zero.unwrap_err().key, "maxDepth");
}

#[test]
fn inspector_stops_at_the_first_violation() {
    let p = JsonProtection::compile(JsonProtectionSettings::default(), &crate::testutil::plain())
        .unwrap();
    let mut i = p.body_inspector().unwrap();
    assert!(i.end().is_ok(), "an empty body passes");
    let mut i = p.body_inspector().unwrap();
    i.chunk(b"[[[[").unwrap();
    let e = i.chunk(&[b'['; 100]).unwrap_err();
    assert_eq!(e.to_json()["violation"], "maxDepth");
    let mut i = p.body_inspector().unwrap();
    i.chunk(br#"{"a":"#).unwrap();
    assert_eq!(i.end().unwrap_err().to_json()["violation"], "invalid");
}

#[test]
fn chunked_feeding_matches_whole() {
    let doc = br#"{"k\u00e9y": ["v\ud83d\ude00", 12.5e-3, true, null, {"x": -0}]}"#;
    for split in 0..doc.len() {
        let mut s = Scanner::new(Limits::default());
        s.feed(&doc[..split]).unwrap();
        s.feed(&doc[split..]).unwrap();
        s.finish().unwrap();
    }
}

fn json_text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        any::<i32>().prop_map(|n| n.to_string()),
        any::<f32>().prop_map(|f| format!("{f:?}")),
        "[a-z\\\\\"é😀\\x00-\\x1f]{0,6}".prop_map(|s| format!("\"{s}\"")),
        "\\\\u[0-9a-fA-F]{4}".prop_map(|s| format!("\"{s}\"")),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec(("[a-c]{1,2}", inner), 0..4).prop_map(|v| {
                let items: Vec<String> =
                    v.into_iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                format!("{{{}}}", items.join(","))
            }),
        ]
    })
}

fn agrees(bytes: &[u8]) {
    let ours = Scanner::check(Limits::unlimited(), bytes);
    let serde = serde_json::from_slice::<serde_json::Value>(bytes);
    match (&ours, &serde) {
        (Ok(()), Ok(_)) => {}
        (Err(v), Ok(_)) => assert_eq!(
            v.kind,
            "duplicateKey",
            "{:?}: {v:?}",
            String::from_utf8_lossy(bytes)
        ),
        (Ok(()), Err(e)) => {
            let m = e.to_string();
            assert!(
                m.contains("out of range") || m.contains("recursion limit"),
                "{:?}: serde says {m}",
                String::from_utf8_lossy(bytes)
            );
        }
        (Err(_), Err(_)) => {}
    }
}

/// The quick pass accepts only what the byte-by-byte scan accepts, with the same count of
/// tokens, under `limits`.
fn quick_agrees(bytes: &[u8], limits: Limits) {
    if let Some(tokens) = super::quick::acceptable(bytes, &limits) {
        let mut s = Scanner::new(limits);
        let scanned = s.scan(bytes).and_then(|()| s.finish());
        assert!(
            scanned.is_ok(),
            "{:?}: quick accepts, the scan says {scanned:?}",
            String::from_utf8_lossy(bytes)
        );
        assert_eq!(tokens, s.tokens, "{:?}", String::from_utf8_lossy(bytes));
    }
}

fn tight() -> Limits {
    Limits {
        max_tokens: 12,
        max_size: 60,
        max_depth: 3,
        max_string_length: 3,
        max_key_length: 2,
        max_object_size: 3,
        max_array_size: 3,
        block_proto: true,
    }
}

#[test]
fn the_quick_pass_takes_everyday_bodies() {
    let body = br#"{"person":{"firstName":"Jane","height":172,"newsletter":true,"x":null,"hobby":["chess","hiking"],"n":-1.5e3,"e":{},"a":[]}}"#;
    assert!(super::quick::acceptable(body, &Limits::default()).is_some());
    assert!(super::quick::acceptable(b" [1, 2] \n", &Limits::default()).is_some());
    // Left to the scan: escapes, a duplicate, a number that may go on, a limit.
    for b in [
        &br#"{"a":"\n"}"#[..],
        br#"{"a":1,"a":2}"#,
        b"12",
        br#"{"__proto__":1}"#,
    ] {
        assert!(super::quick::acceptable(b, &Limits::default()).is_none());
    }
    // Fed as one chunk, the scanner ends in the same state either way.
    let mut quick = Scanner::new(Limits::default());
    quick.feed(body).unwrap();
    quick.feed(b"  ").unwrap();
    quick.finish().unwrap();
    assert!(quick.feed(b"1").is_err());
}

proptest! {
    #[test]
    fn the_quick_pass_agrees_with_the_scan(text in json_text(), cut in 0usize..200, junk in "[ ,:\\]\\}\\[\\{\"0-9a-z.+_-]{0,3}") {
        for limits in [Limits::default(), tight(), Limits::unlimited()] {
            quick_agrees(text.as_bytes(), limits);
            let b = text.as_bytes();
            let cut = cut.min(b.len());
            let mut mutated = b[..cut].to_vec();
            mutated.extend_from_slice(junk.as_bytes());
            mutated.extend_from_slice(&b[cut..]);
            quick_agrees(&mutated, limits);
        }
    }

    #[test]
    fn the_quick_pass_agrees_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        quick_agrees(&bytes, Limits::default());
        quick_agrees(&bytes, tight());
    }

    #[test]
    fn never_panics_and_agrees_with_serde_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        agrees(&bytes);
    }

    #[test]
    fn agrees_with_serde_on_json_like_text(text in json_text(), cut in 0usize..200, junk in "[ ,:\\]\\}\\[\\{\"0-9a-z.+-]{0,3}") {
        agrees(text.as_bytes());
        let b = text.as_bytes();
        let cut = cut.min(b.len());
        let mut mutated = b[..cut].to_vec();
        mutated.extend_from_slice(junk.as_bytes());
        mutated.extend_from_slice(&b[cut..]);
        agrees(&mutated);
    }
}
