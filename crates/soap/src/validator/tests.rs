use super::*;
use crate::wsdl::tests::shared;

fn validator(name: &str) -> WsdlValidator {
    WsdlValidator::new(Arc::new(Wsdl::load(&shared(name)).unwrap()), None).unwrap()
}

fn env11(body: &str) -> String {
    format!(
        "<s:Envelope xmlns:s=\"http://schemas.xmlsoap.org/soap/envelope/\"><s:Body>{body}</s:Body></s:Envelope>"
    )
}

fn env12(body: &str) -> String {
    format!(
        "<s:Envelope xmlns:s=\"http://www.w3.org/2003/05/soap-envelope\"><s:Header/><s:Body>{body}</s:Body></s:Envelope>"
    )
}

#[test]
fn cities_shared_samples() {
    let v = validator("cities.wsdl");
    let ok = std::fs::read(shared("city.soap.xml").to_string()).unwrap();
    v.check(&ok, false).unwrap();
    let bad = std::fs::read(shared("invalid-city.soap.xml").to_string()).unwrap();
    let (msg, ver) = v.check(&bad, false).unwrap_err();
    assert!(msg.contains("INVALID"), "{msg}");
    assert_eq!(ver, Some(SoapVersion::V11));
}

#[test]
fn envelope_structure_and_operations() {
    let v = validator("cities.wsdl");
    let get = "<c:getCity xmlns:c=\"https://predic8.de/cities\"><name>Bonn</name></c:getCity>";
    v.check(env12(get).as_bytes(), false).unwrap();
    // a response element is not a request
    let resp = "<c:getCityResponse xmlns:c=\"https://predic8.de/cities\"><country>DE</country><population>1</population></c:getCityResponse>";
    assert!(v
        .check(env11(resp).as_bytes(), false)
        .unwrap_err()
        .0
        .contains("expected one of"));
    v.check(env11(resp).as_bytes(), true).unwrap();
    let bad_pop = resp.replace(">1<", ">many<");
    assert!(v.check(env11(&bad_pop).as_bytes(), true).is_err());
    assert!(v.check(b"<a/>", false).is_err());
    assert!(v.check(b"not xml", false).is_err());
    assert!(v
        .check(env11("").as_bytes(), false)
        .unwrap_err()
        .0
        .contains("empty"));
    let fault = "<s:Fault xmlns:s=\"http://schemas.xmlsoap.org/soap/envelope/\"><faultcode>s:Server</faultcode><faultstring>x</faultstring></s:Fault>";
    v.check(env11(fault).as_bytes(), true).unwrap();
    let dtd = format!("<!DOCTYPE x>{}", env11(get));
    assert!(v
        .check(dtd.as_bytes(), false)
        .unwrap_err()
        .0
        .contains("DTD"));
}

#[test]
fn padding_changes_neither_verdicts_nor_line_numbers() {
    assert!(ascii_compatible(b"<a/>"));
    assert!(ascii_compatible(b"\xEF\xBB\xBF<a/>"));
    assert!(ascii_compatible(b"\n<a/>"));
    assert!(!ascii_compatible(b"<\0a\0"));
    assert!(!ascii_compatible(b"\xFF\xFE<\0"));
    assert!(!ascii_compatible(b"<"));
    let v = validator("cities.wsdl");
    let resp = "<c:getCityResponse xmlns:c=\"https://predic8.de/cities\">\n<country>DE</country>\n<population>many</population></c:getCityResponse>";
    let (msg, _) = v.check(env11(resp).as_bytes(), true).unwrap_err();
    assert!(msg.starts_with("line 3: "), "{msg}");
    // UTF-16 (with a byte order mark) is parsed as it is, without padding.
    let get =
        env11("<c:getCity xmlns:c=\"https://predic8.de/cities\"><name>Bonn</name></c:getCity>");
    let mut utf16 = vec![0xFF, 0xFE];
    utf16.extend(get.encode_utf16().flat_map(u16::to_le_bytes));
    v.check(&utf16, false).unwrap();
    // Content after the root element is still refused.
    assert!(v.check(format!("{get}<x/>").as_bytes(), false).is_err());
    assert!(v.check(format!("{get} x").as_bytes(), false).is_err());
}

proptest::proptest! {
    #[test]
    fn envelope_checks_never_panic(input in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
        let v = validator("cities.wsdl");
        let _ = v.check(&input, false);
        let _ = v.check(&input, true);
    }

    #[test]
    fn envelope_checks_never_panic_on_soapish(body in "[<>/a-z:= \"&;]{0,80}") {
        let v = validator("cities.wsdl");
        let _ = v.check(env11(&body).as_bytes(), false);
    }
}

/// Messages built from envelope parts, body elements and values, valid and not.
fn soapish() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let root = prop::sample::select(vec![
        (
            "<s:Envelope xmlns:s=\"http://schemas.xmlsoap.org/soap/envelope/\">",
            "</s:Envelope>",
        ),
        (
            "<s:Envelope xmlns:s=\"http://www.w3.org/2003/05/soap-envelope\">",
            "</s:Envelope>",
        ),
        ("<s:Envelope xmlns:s=\"urn:other\">", "</s:Envelope>"),
        (
            "<s:Other xmlns:s=\"http://schemas.xmlsoap.org/soap/envelope/\">",
            "</s:Other>",
        ),
    ]);
    let part = prop::sample::select(vec![
        "<s:Header/>",
        "<s:Header><x:h xmlns:x=\"urn:x\">1</x:h></s:Header>",
        "<s:Body>",
        "</s:Body>",
        "<s:Body/>",
        "<extra/>",
        "text",
        "<c:getCity xmlns:c=\"https://predic8.de/cities\"><name>Bonn</name></c:getCity>",
        "<c:getCity xmlns:c=\"https://predic8.de/cities\"><name>Bonn</name><name>x</name></c:getCity>",
        "<c:getCity xmlns:c=\"https://predic8.de/cities\"/>",
        "<c:getCityResponse xmlns:c=\"https://predic8.de/cities\"><country>DE</country><population>1</population></c:getCityResponse>",
        "<c:getCityResponse xmlns:c=\"https://predic8.de/cities\"><country>DE</country><population>x</population></c:getCityResponse>",
        "<c:unknown xmlns:c=\"https://predic8.de/cities\"/>",
        "<s:Fault><faultcode>s:Server</faultcode><faultstring>x</faultstring></s:Fault>",
        "<!-- c -->",
    ]);
    (root, prop::collection::vec(part, 0..6))
        .prop_map(|((open, close), parts)| format!("{open}{}{close}", parts.concat()))
}

proptest::proptest! {
    /// The streaming check and the check on a tree give the same verdicts, SOAP versions
    /// and, for everything but the schema validator's own words, the same messages.
    #[test]
    fn streaming_and_tree_checks_agree(msg in soapish(), response in proptest::prelude::any::<bool>()) {
        let v = validator("cities.wsdl");
        proptest::prop_assert!(v.wsdl.schema_set.validates_envelopes());
        let streamed = v.check_streaming(msg.as_bytes(), response);
        let tree = v.check_tree(msg.as_bytes(), response);
        match (&streamed, &tree) {
            (Ok(()), Ok(())) => {}
            (Err((a, va)), Err((b, vb))) => {
                proptest::prop_assert_eq!(va, vb);
                let schema_words = |m: &str| m.starts_with("line ") || m.starts_with("Element ");
                if !(schema_words(a) && schema_words(b)) {
                    proptest::prop_assert_eq!(a, b);
                }
            }
            _ => proptest::prop_assert!(false, "{msg}: streamed {streamed:?}, tree {tree:?}"),
        }
    }
}

#[test]
fn qualified_and_unqualified_forms() {
    let v = validator("qualified-elements.wsdl");
    let ok = "<q:sendMessage xmlns:q=\"https://example.com/qualified\"><q:text>hi</q:text><q:priority>1</q:priority></q:sendMessage>";
    v.check(env11(ok).as_bytes(), false).unwrap();
    let unq = "<q:sendMessage xmlns:q=\"https://example.com/qualified\"><text>hi</text><priority>1</priority></q:sendMessage>";
    assert!(v.check(env11(unq).as_bytes(), false).is_err());
    let v = validator("cities.wsdl");
    let qual = "<c:getCity xmlns:c=\"https://predic8.de/cities\"><c:name>Bonn</c:name></c:getCity>";
    assert!(v.check(env11(qual).as_bytes(), false).is_err());
}

#[test]
fn partner_facets_enumerations_and_optional_elements() {
    let v = validator("partner.wsdl");
    let req = |body: &str| {
        env11(&format!(
            "<p:getPartners xmlns:p=\"http://example.com/partner\">{body}</p:getPartners>"
        ))
    };
    v.check(req("").as_bytes(), false).unwrap();
    v.check(
        req("<city>Bonn</city><kind>PERSON</kind>").as_bytes(),
        false,
    )
    .unwrap();
    assert!(v
        .check(req("<kind>ALIEN</kind>").as_bytes(), false)
        .is_err());
    assert!(v
        .check(
            req("<kind>PERSON</kind><city>Bonn</city>").as_bytes(),
            false
        )
        .is_err());
    let get = |id: &str| {
        env11(&format!(
            "<p:getPartner xmlns:p=\"http://example.com/partner\"><id>{id}</id></p:getPartner>"
        ))
    };
    v.check(get("42").as_bytes(), false).unwrap();
    assert!(v.check(get("forty-two").as_bytes(), false).is_err());
}
