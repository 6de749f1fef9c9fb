use super::*;
use proptest::prelude::*;

fn attack(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/../../../shared/data/xml-attacks/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

#[test]
fn plain_documents_pass_unchanged() {
    for f in ["simple.xml", "simple-ns.xml"] {
        let doc = attack(f);
        assert!(
            matches!(check(&doc, &Limits::default()), Ok(Cow::Borrowed(_))),
            "{f}"
        );
    }
}

#[test]
fn dtd_is_removed_or_rejected() {
    let doc = attack("dtd.xml");
    let out = check(&doc, &Limits::default()).unwrap();
    let s = String::from_utf8(out.into_owned()).unwrap();
    assert!(!s.contains("DOCTYPE"));
    assert!(s.contains("<body>text</body>"));
    let strict = Limits {
        remove_dtd: false,
        ..Limits::default()
    };
    assert!(check(&doc, &strict).unwrap_err().message.contains("DTD"));
}

#[test]
fn entity_attacks_are_rejected_quickly() {
    for f in [
        "xmlbomb.xml",
        "xmlbomb2.xml",
        "cyclic.xml",
        "quadratic.xml",
        "external.xml",
        "external_file.xml",
    ] {
        let doc = attack(f);
        let t = std::time::Instant::now();
        let err = check(&doc, &Limits::default()).unwrap_err();
        assert!(err.message.contains("entit"), "{f}: {}", err.message);
        assert!(t.elapsed() < std::time::Duration::from_millis(10), "{f}");
    }
}

#[test]
fn limits_are_enforced() {
    let l = Limits {
        max_attribute_count: 2,
        max_element_name_length: 5,
        max_depth: 3,
        max_size: Some(200),
        max_text_length: Some(10),
        remove_dtd: true,
    };
    assert!(check(b"<a x='1' y='2'/>", &l).is_ok());
    assert!(check(b"<a x='1' y='2' z='3'/>", &l).is_err());
    assert!(check(b"<abcdef/>", &l).is_err());
    assert!(check(b"<a><b><c/></b></a>", &l).is_ok());
    assert!(check(b"<a><b><c><d/></c></b></a>", &l).is_err());
    assert!(check(b"<a>0123456789</a>", &l).is_ok());
    assert!(check(b"<a>0123456789&amp;</a>", &l).is_err());
    assert!(check(b"<a><![CDATA[0123456789x]]></a>", &l).is_err());
    let big = format!("<a>{}</a>", "<b/>".repeat(60));
    assert_eq!(
        check(big.as_bytes(), &l).unwrap_err().status,
        StatusCode::PAYLOAD_TOO_LARGE
    );
}

#[test]
fn the_size_limit_stops_reading_early() {
    let p = XmlProtection::compile(
        XmlProtectionSettings {
            max_size: Some(turnpike_config::units::ByteSize(10)),
            ..Default::default()
        },
        &turnpike_core::CompileContext::standalone(),
    )
    .unwrap();
    let mut i = p.body_inspector().unwrap();
    i.chunk(b"<a>12").unwrap();
    assert_eq!(i.chunk(b"345678</a>").unwrap_err().status, 413);
    let unlimited = XmlProtection::compile(
        XmlProtectionSettings::default(),
        &turnpike_core::CompileContext::standalone(),
    )
    .unwrap();
    assert!(unlimited.body_inspector().is_none());
}

#[test]
fn malformed_documents_are_rejected() {
    let l = Limits::default();
    for doc in [
        &b""[..],
        b"<a>",
        b"<a></b>",
        b"<a/><b/>",
        b"text<a/>",
        b"<a x='1' x='2'/>",
        b"<a x='&foo;'/>",
        b"<a/><!DOCTYPE a>",
    ] {
        assert!(check(doc, &l).is_err(), "{}", String::from_utf8_lossy(doc));
    }
    assert!(check(b"<a>&#65;&lt;&#x42;</a>", &l).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn never_panics(input in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = check(&input, &Limits::default());
    }

    #[test]
    fn never_panics_on_xmlish(input in "[<>/a-c:=\"' &;#x0-9!\\[\\]DOCTYPEN-]{0,200}") {
        let _ = check(input.as_bytes(), &Limits::default());
    }

    /// The quick pass only ever accepts what the event reader accepts unchanged.
    #[test]
    fn the_quick_pass_agrees_with_the_event_reader(
        doc in document(),
        limits in (
            proptest::option::of(1usize..4),
            proptest::option::of(1usize..6),
            proptest::option::of(1usize..6),
            proptest::option::of(1usize..12),
        ),
    ) {
        // Each limit small, or the default.
        let d = Limits::default();
        let limits = Limits {
            max_attribute_count: limits.0.unwrap_or(d.max_attribute_count),
            max_element_name_length: limits.1.unwrap_or(d.max_element_name_length),
            max_depth: limits.2.unwrap_or(d.max_depth),
            max_size: None,
            max_text_length: limits.3,
            remove_dtd: true,
        };
        for l in [Limits::default(), limits] {
            let slow = check_events(doc.as_bytes(), &l);
            if plainly_acceptable(doc.as_bytes(), &l) {
                prop_assert!(matches!(slow, Ok(Cow::Borrowed(_))), "{doc} {l:?}");
            }
        }
    }

    #[test]
    fn the_quick_pass_agrees_on_xmlish(input in "[<>/a-c:=\"' &;#x0-9?\\[\\]-]{0,120}") {
        if plainly_acceptable(input.as_bytes(), &Limits::default()) {
            prop_assert!(matches!(
                check_events(input.as_bytes(), &Limits::default()),
                Ok(Cow::Borrowed(_))
            ));
        }
    }
}

/// Documents for the quick pass's agreement test: element trees, mostly well-formed, with
/// names, attributes, texts and surroundings that the quick pass or the reader refuse.
fn document() -> impl Strategy<Value = String> {
    let name = proptest::sample::select(vec!["a", "b", "ab:c", "abcdefg", "é", "a1"]);
    let attr = prop_oneof![
        6 => proptest::sample::select(vec![
            " x=\"1\"", " y='2'", " z=\"\"", "\n\tx=\"a b\"", " w=\">\"", " x=\"&amp;\"",
        ]),
        1 => proptest::sample::select(vec![
            " x=\"&foo;\"", " x=\"<\"", " x=1", " x = \"1\"", "x=\"1\"", " x", " x=\"1",
        ]),
    ];
    let text = prop_oneof![
        6 => proptest::sample::select(vec![
            "", "text", " ", "\n", "&amp;", "a&#65;b", "x &lt; y", "é", ">", "<?pi x?>", "<??>",
            "a\"b'c", "]]>", ";", "\u{c}", "&#x42;",
        ]),
        1 => proptest::sample::select(vec![
            "&foo;", "&;", "&", "&#0;", "&amp", "<!-- c -->", "<![CDATA[x]]>", "<?>", "</a>", "<",
        ]),
    ];
    let leaf = (
        name.clone(),
        proptest::collection::vec(attr.clone(), 0..4),
        text.clone(),
    )
        .prop_map(|(n, a, t)| {
            if t.is_empty() {
                format!("<{n}{}/>", a.concat())
            } else {
                format!("<{n}{}>{t}</{n}>", a.concat())
            }
        });
    let tree = leaf.prop_recursive(5, 40, 5, move |inner| {
        (
            name.clone(),
            proptest::collection::vec(attr.clone(), 0..4),
            proptest::collection::vec(
                prop_oneof![inner, text.clone().prop_map(String::from)],
                0..5,
            ),
            prop_oneof![12 => Just(""), 1 => Just(" "), 1 => Just("x"), 1 => Just("b")],
        )
            .prop_map(|(n, a, children, end)| {
                let end = match end {
                    "" => n.to_owned(),
                    " " => format!("{n} "),
                    other => other.to_owned(),
                };
                format!("<{n}{}>{}</{end}>", a.concat(), children.concat())
            })
    });
    let around = prop_oneof![
        6 => proptest::sample::select(vec!["", " \n", "\u{feff}", "<?xml version=\"1.0\"?>"]),
        1 => proptest::sample::select(vec!["<?>", "x", "<a/>", "<!-- c -->", "&amp;", "\u{c}"]),
    ];
    (around.clone(), tree, around).prop_map(|(a, t, b)| format!("{a}{t}{b}"))
}

#[test]
fn the_quick_pass_takes_everyday_messages() {
    let l = Limits::default();
    for doc in [
        &b"<a/>"[..],
        b"\xEF\xBB\xBF<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<s:Envelope xmlns:s=\"urn:s\">\n <s:Body><p:op xmlns:p='urn:p' a=\"1\"><x>1 &lt; 2 &#x42;</x><y/></p:op></s:Body>\n</s:Envelope>\n",
    ] {
        assert!(plainly_acceptable(doc, &l), "{}", String::from_utf8_lossy(doc));
        assert!(matches!(check_events(doc, &l), Ok(Cow::Borrowed(_))));
    }
    // Texts longer than the byte-by-byte look-ahead.
    let long = format!("<a>{}&amp;{}</a>", "x".repeat(40), "y".repeat(40));
    assert!(plainly_acceptable(long.as_bytes(), &l));
    let bad_ref = long.replace("&amp;", "&foo;");
    assert!(!plainly_acceptable(bad_ref.as_bytes(), &l));
    assert!(check(bad_ref.as_bytes(), &l).is_err());
    let unclosed = format!("<a>{}", "x".repeat(80));
    assert!(!plainly_acceptable(unclosed.as_bytes(), &l));
    let soap = std::fs::read_to_string(format!(
        "{}/../../bench/configs/soap-request.lua",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let body = soap
        .split("wrk.body = '")
        .nth(1)
        .unwrap()
        .split('\'')
        .next()
        .unwrap();
    assert!(plainly_acceptable(body.as_bytes(), &l));
    for f in ["simple.xml", "simple-ns.xml"] {
        let doc = attack(f);
        assert_eq!(
            plainly_acceptable(&doc, &l),
            !doc.windows(2).any(|w| w == b"<!"),
            "{f}"
        );
    }
}
