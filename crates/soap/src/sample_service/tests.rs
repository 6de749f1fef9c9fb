use super::*;
use std::sync::Arc;

use crate::fetch::Location;
use crate::validator::WsdlValidator;
use crate::wsdl::Wsdl;

fn service() -> SampleSoapService {
    SampleSoapService::compile(
        SampleSoapServiceSettings::default(),
        &CompileContext::standalone(),
    )
    .unwrap()
}

fn exchange(method: &str, uri: &str, headers: &[(&str, &str)], body: &str) -> Exchange {
    let mut b = http::Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let (parts, _) = b.body(()).unwrap().into_parts();
    Exchange::new(
        parts,
        Body::full(body.to_owned()),
        "192.0.2.1:5000".parse().unwrap(),
        Default::default(),
    )
}

/// Runs the policy; returns (status, content type, body).
fn call(method: &str, uri: &str, headers: &[(&str, &str)], body: &str) -> (u16, String, String) {
    let mut ex = exchange(method, uri, headers, body);
    let Outcome::Respond(res) = service().on_request(&mut ex) else {
        panic!("sampleSoapService did not answer");
    };
    let ct = res.headers()[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_owned();
    let text = match res.body() {
        Body::Full(Some(b)) => String::from_utf8(b.to_vec()).unwrap(),
        Body::Empty => String::new(),
        _ => panic!("not a full body"),
    };
    (res.status().as_u16(), ct, text)
}

fn envelope(inner: &str) -> String {
    format!(
        "<s11:Envelope xmlns:s11=\"http://schemas.xmlsoap.org/soap/envelope/\" xmlns:cs=\"https://predic8.de/cities\"><s11:Body>{inner}</s11:Body></s11:Envelope>"
    )
}

fn get_city(name: &str) -> String {
    envelope(&format!("<cs:getCity><name>{name}</name></cs:getCity>"))
}

fn post(body: &str) -> (u16, String, String) {
    call(
        "POST",
        "/city-service",
        &[("host", "gw"), ("content-type", "text/xml")],
        body,
    )
}

/// A validator for the WSDL as served at `location`.
fn validator(location: &str) -> (tempfile::TempDir, WsdlValidator) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("city.wsdl");
    std::fs::write(&path, service().wsdl(location)).unwrap();
    let wsdl = Wsdl::load(&Location::File(path)).unwrap();
    (dir, WsdlValidator::new(Arc::new(wsdl), None).unwrap())
}

#[test]
fn every_city_is_answered_with_its_country_and_population() {
    let (_dir, v) = validator("http://gw/city-service");
    assert_eq!(CITIES.len(), 21);
    for c in CITIES {
        let (status, ct, body) = post(&get_city(&crate::xml::escape(c.name)));
        assert_eq!((status, ct.as_str()), (200, "text/xml"), "{}", c.name);
        let root = crate::xml::parse(body.as_bytes()).unwrap();
        let res = root
            .element(SOAP11_ENV_NS, "Body")
            .and_then(|b| b.element(CITY_NS, "getCityResponse"))
            .unwrap_or_else(|| panic!("{}: {body}", c.name));
        assert_eq!(res.element("", "country").unwrap().text(), c.country);
        assert_eq!(
            res.element("", "population").unwrap().text(),
            c.population.to_string()
        );
        // The answer is valid against the service's own WSDL.
        v.check(body.as_bytes(), true)
            .unwrap_or_else(|e| panic!("{}: {e:?}", c.name));
    }
    assert_eq!(
        find_city("São Paulo").map(|c| (c.population, c.country)),
        Some((22_990_000, "Brazil"))
    );
    assert_eq!(find_city("bonn"), None, "names are matched exactly");
}

#[test]
fn the_answer_is_membranes_document() {
    let (_, _, body) = post(&get_city("Bonn"));
    assert_eq!(
        body,
        "<s:Envelope xmlns:s=\"http://schemas.xmlsoap.org/soap/envelope/\" xmlns:cs=\"https://predic8.de/cities\">\n    <s:Body>\n        <cs:getCityResponse>\n            <country>Germany</country>\n            <population>327000</population>\n        </cs:getCityResponse>\n    </s:Body>\n</s:Envelope>\n"
    );
}

#[test]
fn the_answer_is_a_soap_11_envelope() {
    // Whatever the request's SOAP version, the answer is SOAP 1.1, as in Membrane.
    let soap12 = "<env:Envelope xmlns:env=\"http://www.w3.org/2003/05/soap-envelope\"><env:Body><cs:getCity xmlns:cs=\"https://predic8.de/cities\"><name>Berlin</name></cs:getCity></env:Body></env:Envelope>";
    for req in [get_city("Berlin"), soap12.to_owned()] {
        let (_, _, body) = post(&req);
        let root = crate::xml::parse(body.as_bytes()).unwrap();
        assert!(root.is(SOAP11_ENV_NS, "Envelope"), "{body}");
        assert!(root.element(SOAP11_ENV_NS, "Body").is_some());
        assert!(body.contains("<population>3897000</population>"));
    }
}

#[test]
fn an_unknown_city_is_a_fault_with_the_name_escaped() {
    let (status, ct, body) = post(&get_city("Atlantis"));
    assert_eq!((status, ct.as_str()), (200, "text/xml"));
    assert_eq!(
        body,
        "    <s11:Envelope xmlns:s11=\"http://schemas.xmlsoap.org/soap/envelope/\">\n        <s11:Body>\n            <s11:Fault>\n                <faultcode>s11:Client</faultcode>\n                <faultstring>Not Found</faultstring>\n                <detail>\n                    <errorcode>404</errorcode>\n                    <errormessage>Do not know Atlantis. Try Bonn, London or New York</errormessage>\n                </detail>\n            </s11:Fault>\n        </s11:Body>\n    </s11:Envelope>\n"
    );
    // Markup in the name stays text.
    let (_, _, body) = post(&get_city("a &lt;b&gt; &amp; <![CDATA[<c/>]]>"));
    let root = crate::xml::parse(body.as_bytes()).unwrap();
    let fault = root
        .element(SOAP11_ENV_NS, "Body")
        .and_then(|b| b.element(SOAP11_ENV_NS, "Fault"))
        .unwrap();
    let msg = fault
        .element("", "detail")
        .and_then(|d| d.element("", "errormessage"))
        .unwrap();
    assert_eq!(
        msg.text(),
        "Do not know a <b> & <c/>. Try Bonn, London or New York"
    );
    assert_eq!(msg.elements().count(), 0);
    // The name is taken as it is: no trimming, exact case; an empty element names "".
    assert!(post(&get_city(" Bonn "))
        .2
        .contains("Do not know  Bonn . Try"));
    assert!(post(&get_city("BONN")).2.contains("Do not know BONN."));
    assert!(post(&envelope("<cs:getCity><name/></cs:getCity>"))
        .2
        .contains("Do not know . Try"));
}

#[test]
fn a_body_without_a_name_is_resource_not_found() {
    let not_found = |body: &str| {
        let (status, ct, text) = post(body);
        assert_eq!((status, ct.as_str()), (200, "text/xml"), "{body}");
        assert!(
            text.contains("<faultstring>Resource Not Found</faultstring>")
                && text.contains("<errorcode>404</errorcode>"),
            "{body}: {text}"
        );
        text
    };
    let text = not_found(&envelope("<cs:getCity><city>Bonn</city></cs:getCity>"));
    // Membrane writes the hint as markup; here it is text.
    assert!(text.contains(
        "<errormessage>Cannot parse SOAP message. Request should contain e.g. &lt;name&gt;Bonn&lt;/name&gt;</errormessage>"
    ));
    let root = crate::xml::parse(text.as_bytes()).unwrap();
    assert!(root.is(SOAP11_ENV_NS, "Envelope"));
    // Empty, mixed content, an undefined entity.
    not_found("");
    not_found(&envelope("<cs:getCity><name>Bo<b/>nn</name></cs:getCity>"));
    not_found(&envelope("<cs:getCity><name>&bonn;</name></cs:getCity>"));
    // A character XML does not allow.
    not_found(&envelope("<cs:getCity><name>&#1;</name></cs:getCity>"));
}

#[test]
fn a_body_that_is_not_xml_is_resource_not_found() {
    for body in [
        "{\"name\": \"Bonn\"}",
        "name=Bonn",
        "Bonn<name>Bonn</name>",
        "<a><b></a><name>Bonn</name>",
        "<a/><name>Bonn</name>",
        "<name>Bonn",
    ] {
        let (status, _, text) = post(body);
        assert_eq!(status, 200);
        assert!(text.contains("Resource Not Found"), "{body}: {text}");
    }
}

#[test]
fn the_first_name_element_counts_in_any_namespace() {
    // As Membrane streams: the first `name` anywhere, whatever its prefix; the body after it is
    // not read.
    let (_, _, body) =
        post("<x:req xmlns:x=\"urn:x\"><x:name>London</x:name><name>Bonn</name></x:req> trailing");
    assert!(body.contains("<country>England</country>"), "{body}");
    let (_, _, body) = post("<name>New York</name>");
    assert!(body.contains("<population>8460000</population>"), "{body}");
    assert!(post(
        "<?xml version=\"1.0\"?>\n<!-- c --><a><name><!-- x -->Da <![CDATA[Nang]]></name></a>"
    )
    .2
    .contains("Vietnam"));
}

#[test]
fn other_methods_are_not_allowed() {
    for m in ["GET", "PUT", "DELETE"] {
        let (status, ct, body) = call(m, "/city-service", &[("host", "gw")], "");
        assert_eq!((status, ct.as_str()), (200, "text/xml"));
        assert!(
            body.contains(&format!(
                "<faultstring>Method {m} not allowed</faultstring>"
            )) && body.contains("<errorcode>405</errorcode>")
                && body.contains("<errormessage>Use POST to access the service.</errormessage>"),
            "{body}"
        );
    }
}

#[test]
fn the_wsdl_is_served_with_the_address_of_the_request() {
    let (status, ct, body) = call(
        "GET",
        "/city-service?wsdl",
        &[("host", "gw.example:8080")],
        "",
    );
    assert_eq!((status, ct.as_str()), (200, "text/xml;charset=UTF-8"));
    assert!(
        body.contains("<s:address location=\"http://gw.example:8080/city-service\"/>"),
        "{body}"
    );
    assert!(!body.contains("localhost:2000"));
    // Only the address changed.
    assert_eq!(
        body.replace(
            "http://gw.example:8080/city-service",
            "http://localhost:2000/cities"
        ),
        CITY_WSDL
    );
    let (_dir, v) = validator("http://gw.example:8080/city-service");
    assert!(v.check(get_city("Bonn").as_bytes(), false).is_ok());
    assert!(v
        .check(
            envelope("<cs:getCity><city>Bonn</city></cs:getCity>").as_bytes(),
            false
        )
        .is_err());
    // The WSDL's address and operation as a client sees them.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.wsdl");
    std::fs::write(&path, &body).unwrap();
    let w = Wsdl::load(&Location::File(path)).unwrap();
    let ports: Vec<_> = w.services.iter().flat_map(|s| s.ports.iter()).collect();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].address, "http://gw.example:8080/city-service");

    // Any method; `wsdl` anywhere in the query, in any case; the query is not in the address.
    for uri in ["/a/b?WSDL", "/a/b?content-wsdl", "/a/b?x=1&wSdL"] {
        let (status, _, body) = call("POST", uri, &[("host", "h")], "<name>Bonn</name>");
        assert_eq!(status, 200);
        assert!(body.contains("location=\"http://h/a/b\""), "{uri}: {body}");
    }
    for uri in ["/a/b?w-sdl", "/wsdl", "/a?bar"] {
        assert!(!is_wsdl_request(&uri.parse().unwrap()), "{uri}");
    }
    // A TLS listener gives https; the host is escaped into the attribute.
    let mut ex = exchange("GET", "/s?wsdl", &[("host", "a\"b")], "");
    ex.tls = true;
    let Outcome::Respond(res) = service().on_request(&mut ex) else {
        panic!()
    };
    let Body::Full(Some(b)) = res.body() else {
        panic!()
    };
    assert!(String::from_utf8_lossy(b).contains("location=\"https://a&quot;b/s\""));
}

#[test]
fn the_wsdl_address_is_the_path_as_received() {
    // A rewriter before the service changes the request's path, not the published address.
    let mut ex = exchange("GET", "/public/cities?wsdl", &[("host", "h")], "");
    ex.request.uri = "/internal?wsdl".parse().unwrap();
    let Outcome::Respond(res) = service().on_request(&mut ex) else {
        panic!()
    };
    let Body::Full(Some(b)) = res.body() else {
        panic!()
    };
    assert!(String::from_utf8_lossy(b).contains("location=\"http://h/public/cities\""));
}

#[test]
fn settings_are_empty() {
    let kind = turnpike_core::PolicyKind::of::<SampleSoapService>();
    assert!(kind.answers && kind.soap);
    assert!((kind.compile)(serde_json::json!({}), &CompileContext::standalone()).is_ok());
    assert!((kind.compile)(serde_json::json!({"x": 1}), &CompileContext::standalone()).is_err());
}
