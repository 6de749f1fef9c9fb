//! WSDL validation per XML Schema construct, with verdicts compared to `xmllint --schema`;
//! `xsd:import`/`xsd:include` resolved relative to the WSDL; rpc/literal with SOAP 1.2.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use turnpike_soap::wsdl::XSD_NS;
use turnpike_soap::{xml, Location, SoapVersion, Wsdl, WsdlValidator};

const SHARED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data/wsdl");

/// A WSDL exercising the constructs the issue lists, with one document/literal operation whose
/// request element is `t:check`.
const CONSTRUCTS: &str = r#"<?xml version="1.0"?>
<wsdl:definitions xmlns:wsdl="http://schemas.xmlsoap.org/wsdl/"
    xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/"
    xmlns:xsd="http://www.w3.org/2001/XMLSchema"
    xmlns:t="urn:constructs" xmlns:o="urn:other" targetNamespace="urn:constructs">
  <wsdl:types>
    <xsd:schema targetNamespace="urn:other" elementFormDefault="qualified">
      <xsd:element name="note" type="xsd:string"/>
    </xsd:schema>
    <xsd:schema targetNamespace="urn:constructs">
      <xsd:import namespace="urn:other"/>
      <xsd:simpleType name="Code">
        <xsd:restriction base="xsd:string">
          <xsd:pattern value="[A-Z]{3}"/>
        </xsd:restriction>
      </xsd:simpleType>
      <xsd:simpleType name="Small">
        <xsd:restriction base="xsd:int">
          <xsd:minInclusive value="1"/>
          <xsd:maxInclusive value="9"/>
        </xsd:restriction>
      </xsd:simpleType>
      <xsd:element name="check">
        <xsd:complexType>
          <xsd:sequence>
            <xsd:element name="code" type="t:Code"/>
            <xsd:element name="small" type="t:Small" minOccurs="0"/>
            <xsd:element name="tag" type="xsd:string" minOccurs="0" maxOccurs="3"/>
            <xsd:choice>
              <xsd:element name="email" type="xsd:string"/>
              <xsd:element name="phone" type="xsd:string"/>
            </xsd:choice>
            <xsd:element name="flags">
              <xsd:complexType>
                <xsd:all>
                  <xsd:element name="a" type="xsd:boolean"/>
                  <xsd:element name="b" type="xsd:date"/>
                </xsd:all>
              </xsd:complexType>
            </xsd:element>
            <xsd:element name="maybe" type="xsd:decimal" nillable="true"/>
            <xsd:element ref="o:note" minOccurs="0"/>
          </xsd:sequence>
          <xsd:attribute name="id" type="xsd:long" use="required"/>
          <xsd:attribute name="lang" type="xsd:language"/>
        </xsd:complexType>
      </xsd:element>
      <xsd:element name="checkResponse" type="xsd:string"/>
    </xsd:schema>
  </wsdl:types>
  <wsdl:message name="In"><wsdl:part name="p" element="t:check"/></wsdl:message>
  <wsdl:message name="Out"><wsdl:part name="p" element="t:checkResponse"/></wsdl:message>
  <wsdl:portType name="PT">
    <wsdl:operation name="check"><wsdl:input message="t:In"/><wsdl:output message="t:Out"/></wsdl:operation>
  </wsdl:portType>
  <wsdl:binding name="B" type="t:PT">
    <soap:binding style="document" transport="http://schemas.xmlsoap.org/soap/http"/>
    <wsdl:operation name="check">
      <soap:operation soapAction="check"/>
      <wsdl:input><soap:body use="literal"/></wsdl:input>
      <wsdl:output><soap:body use="literal"/></wsdl:output>
    </wsdl:operation>
  </wsdl:binding>
  <wsdl:service name="S">
    <wsdl:port name="P" binding="t:B"><soap:address location="http://localhost:1/c"/></wsdl:port>
  </wsdl:service>
</wsdl:definitions>"#;

fn check(inner: &str, attrs: &str) -> String {
    format!(
        "<t:check xmlns:t=\"urn:constructs\" xmlns:o=\"urn:other\" xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" {attrs}>{inner}</t:check>"
    )
}

const BASE_TAIL: &str =
    "<email>a@b</email><flags><a>true</a><b>2024-02-29</b></flags><maybe>1.5</maybe>";

/// (name, payload, valid?)
fn construct_cases() -> Vec<(&'static str, String, bool)> {
    let ok = |s: &str| check(&format!("<code>ABC</code>{s}"), "id=\"7\"");
    vec![
        ("minimal", ok(BASE_TAIL), true),
        ("optional and repeated", check(&format!("<code>ABC</code><small>9</small><tag>x</tag><tag>y</tag><tag>z</tag>{BASE_TAIL}<o:note>n</o:note>"), "id=\"7\" lang=\"de\""), true),
        ("pattern facet", check(&format!("<code>AB1</code>{BASE_TAIL}"), "id=\"7\""), false),
        ("range facet", check(&format!("<code>ABC</code><small>10</small>{BASE_TAIL}"), "id=\"7\""), false),
        ("maxOccurs", check(&format!("<code>ABC</code><tag>1</tag><tag>2</tag><tag>3</tag><tag>4</tag>{BASE_TAIL}"), "id=\"7\""), false),
        ("sequence order", check(&format!("<tag>x</tag><code>ABC</code>{BASE_TAIL}"), "id=\"7\""), false),
        ("missing required element", check("<code>ABC</code><flags><a>true</a><b>2024-02-29</b></flags><maybe>1</maybe>", "id=\"7\""), false),
        ("choice: other branch", ok("<phone>1</phone><flags><a>0</a><b>2024-01-01</b></flags><maybe>1</maybe>"), true),
        ("choice: both branches", ok("<email>e</email><phone>1</phone><flags><a>0</a><b>2024-01-01</b></flags><maybe>1</maybe>"), false),
        ("all: any order", ok("<email>e</email><flags><b>2024-01-01</b><a>1</a></flags><maybe>1</maybe>"), true),
        ("all: missing member", ok("<email>e</email><flags><b>2024-01-01</b></flags><maybe>1</maybe>"), false),
        ("boolean type", ok("<email>e</email><flags><a>yes</a><b>2024-01-01</b></flags><maybe>1</maybe>"), false),
        ("date type", ok("<email>e</email><flags><a>1</a><b>2023-02-29</b></flags><maybe>1</maybe>"), false),
        ("nillable", ok("<email>e</email><flags><a>1</a><b>2024-01-01</b></flags><maybe xsi:nil=\"true\"/>"), true),
        ("empty decimal is not nil", ok("<email>e</email><flags><a>1</a><b>2024-01-01</b></flags><maybe/>"), false),
        ("required attribute", check(&format!("<code>ABC</code>{BASE_TAIL}"), ""), false),
        ("attribute type", check(&format!("<code>ABC</code>{BASE_TAIL}"), "id=\"seven\""), false),
        ("unknown attribute", check(&format!("<code>ABC</code>{BASE_TAIL}"), "id=\"7\" x=\"1\""), false),
        ("unqualified locals must not be qualified", check(&format!("<t:code>ABC</t:code>{BASE_TAIL}"), "id=\"7\""), false),
        ("qualified ref in another namespace", ok(&format!("{BASE_TAIL}<note>n</note>")), false),
        ("unknown element", ok(&format!("{BASE_TAIL}<extra/>")), false),
    ]
}

fn envelope(version: SoapVersion, payload: &str) -> String {
    format!(
        "<e:Envelope xmlns:e=\"{}\"><e:Header/><e:Body>{payload}</e:Body></e:Envelope>",
        version.envelope_ns()
    )
}

fn write_wsdl(dir: &Path, name: &str, text: &str) -> Location {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    Location::File(p)
}

fn validator(loc: &Location) -> WsdlValidator {
    WsdlValidator::new(Arc::new(Wsdl::load(loc).unwrap()), None).unwrap()
}

#[test]
fn every_construct_valid_and_invalid_in_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    let v = validator(&write_wsdl(dir.path(), "c.wsdl", CONSTRUCTS));
    for (name, payload, valid) in construct_cases() {
        for version in [SoapVersion::V11, SoapVersion::V12] {
            let r = v.check(envelope(version, &payload).as_bytes(), false);
            assert_eq!(r.is_ok(), valid, "{name} ({version:?}): {r:?}");
            if let Err((_, ver)) = r {
                assert_eq!(ver, Some(version));
            }
        }
    }
}

/// Writes every inline schema of `wsdl_text` to `dir` with a main schema importing them (the
/// same shape as the gateway builds, done independently here) and returns the main's path.
fn schema_for_xmllint(dir: &Path, wsdl_text: &str) -> std::path::PathBuf {
    let root = xml::parse(wsdl_text.as_bytes()).unwrap();
    let types = root.elements().find(|e| e.local == "types").expect("types");
    let mut main = format!("<xsd:schema xmlns:xsd=\"{XSD_NS}\" targetNamespace=\"urn:main\">");
    for (i, s) in types.elements().enumerate() {
        let path = dir.join(format!("s{i}.xsd"));
        let ns = s.attr("targetNamespace").unwrap_or("");
        let mut text = s.to_standalone_xml();
        // resolve location-less imports of sibling inline schemas
        for (j, other) in types.elements().enumerate() {
            let ons = other.attr("targetNamespace").unwrap_or("");
            text = text.replace(
                &format!("<xsd:import namespace=\"{ons}\"/>"),
                &format!(
                    "<xsd:import namespace=\"{ons}\" schemaLocation=\"{}\"/>",
                    dir.join(format!("s{j}.xsd")).display()
                ),
            );
        }
        std::fs::write(&path, text).unwrap();
        main.push_str(&format!(
            "<xsd:import namespace=\"{ns}\" schemaLocation=\"{}\"/>",
            path.display()
        ));
    }
    main.push_str("</xsd:schema>");
    let p = dir.join("main.xsd");
    std::fs::write(&p, main).unwrap();
    p
}

fn xmllint_valid(schema: &Path, doc: &str, dir: &Path) -> Option<bool> {
    let f = dir.join("doc.xml");
    std::fs::write(&f, doc).unwrap();
    let out = std::process::Command::new("xmllint")
        .arg("--noout")
        .arg("--schema")
        .arg(schema)
        .arg(&f)
        .output()
        .ok()?;
    match out.status.code() {
        Some(0) => Some(true),
        Some(3) => Some(false),
        other => panic!(
            "xmllint failed ({other:?}): {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

#[test]
fn verdicts_match_xmllint() {
    if std::process::Command::new("xmllint")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have xmllint (libxml2-utils)"
        );
        eprintln!("NOTE: skipping: xmllint is not installed (apt-get install libxml2-utils)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cases: Vec<(String, String, String)> = construct_cases()
        .into_iter()
        .map(|(n, p, _)| (CONSTRUCTS.to_owned(), n.to_owned(), p))
        .collect();
    let partner = std::fs::read_to_string(format!("{SHARED}/partner.wsdl")).unwrap();
    for (n, p) in [
        ("partner ok", "<p:getPartner xmlns:p=\"http://example.com/partner\"><id>1</id></p:getPartner>"),
        ("partner id", "<p:getPartner xmlns:p=\"http://example.com/partner\"><id>x</id></p:getPartner>"),
        ("partner kind", "<p:getPartners xmlns:p=\"http://example.com/partner\"><kind>X</kind></p:getPartners>"),
        ("partner create", "<p:createPartner xmlns:p=\"http://example.com/partner\"><name>n</name><birthDate>2000-01-01</birthDate><kind>PERSON</kind><address><street>s</street><houseNumber>1</houseNumber><postalCode>1</postalCode><city>c</city><country>d</country></address></p:createPartner>"),
        ("partner create short", "<p:createPartner xmlns:p=\"http://example.com/partner\"><name>n</name><birthDate>2000-01-01</birthDate><kind>PERSON</kind><address><street>s</street></address></p:createPartner>"),
    ] {
        cases.push((partner.clone(), n.to_owned(), p.to_owned()));
    }
    let cities = std::fs::read_to_string(format!("{SHARED}/cities.wsdl")).unwrap();
    for (n, p) in [
        (
            "city ok",
            "<c:getCity xmlns:c=\"https://predic8.de/cities\"><name>Delhi</name></c:getCity>",
        ),
        (
            "city bad",
            "<c:getCity xmlns:c=\"https://predic8.de/cities\"><INVALID/></c:getCity>",
        ),
    ] {
        cases.push((cities.clone(), n.to_owned(), p.to_owned()));
    }
    let mut compared = 0;
    for (wsdl, name, payload) in cases {
        let sub = tempfile::tempdir_in(dir.path()).unwrap();
        let ours = validator(&write_wsdl(sub.path(), "w.wsdl", &wsdl))
            .check(envelope(SoapVersion::V11, &payload).as_bytes(), false)
            .is_ok();
        let schema = schema_for_xmllint(sub.path(), &wsdl);
        let theirs = xmllint_valid(&schema, &payload, sub.path()).unwrap();
        assert_eq!(ours, theirs, "{name}: turnpike {ours}, xmllint {theirs}");
        compared += 1;
    }
    assert!(compared >= 28);
}

#[test]
fn imports_and_includes_resolve_relative_to_the_wsdl() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("xsd")).unwrap();
    // An included schema (same namespace) next to the WSDL, in a sub-folder; it in turn
    // imports the shared ArticleService.xsd (namespace http://predic8.com/common/1/).
    std::fs::write(
        dir.path().join("xsd/money.xsd"),
        format!(
            r#"<xsd:schema xmlns:xsd="{XSD_NS}" xmlns:c="http://predic8.com/common/1/" targetNamespace="urn:shop">
  <xsd:import namespace="http://predic8.com/common/1/" schemaLocation="{SHARED}/ArticleService.xsd"/>
  <xsd:complexType name="Price"><xsd:sequence><xsd:element name="money" type="c:MoneyType"/></xsd:sequence></xsd:complexType>
</xsd:schema>"#
        ),
    )
    .unwrap();
    let wsdl = r#"<wsdl:definitions xmlns:wsdl="http://schemas.xmlsoap.org/wsdl/" xmlns:soap12="http://schemas.xmlsoap.org/wsdl/soap12/"
    xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:s="urn:shop" xmlns:c="http://predic8.com/common/1/" targetNamespace="urn:shop">
  <wsdl:types>
    <xsd:schema targetNamespace="urn:shop">
      <xsd:include schemaLocation="xsd/money.xsd"/>
      <xsd:import namespace="http://predic8.com/common/1/"/>
      <xsd:element name="buy"><xsd:complexType><xsd:sequence>
        <xsd:element name="id" type="c:IdentifierType"/><xsd:element name="price" type="s:Price"/>
      </xsd:sequence></xsd:complexType></xsd:element>
    </xsd:schema>
  </wsdl:types>
  <wsdl:message name="In"><wsdl:part name="p" element="s:buy"/></wsdl:message>
  <wsdl:portType name="PT"><wsdl:operation name="buy"><wsdl:input message="s:In"/></wsdl:operation></wsdl:portType>
  <wsdl:binding name="B" type="s:PT">
    <soap12:binding style="document" transport="http://schemas.xmlsoap.org/soap/http"/>
    <wsdl:operation name="buy"><soap12:operation soapAction="buy"/><wsdl:input><soap12:body use="literal"/></wsdl:input></wsdl:operation>
  </wsdl:binding>
  <wsdl:service name="S"><wsdl:port name="P" binding="s:B"><soap12:address location="http://localhost:1/shop"/></wsdl:port></wsdl:service>
</wsdl:definitions>"#;
    let loc = write_wsdl(dir.path(), "shop.wsdl", wsdl);
    let w = Wsdl::load(&loc).unwrap();
    assert_eq!(w.port(None, None).unwrap().version, SoapVersion::V12);
    // Every local document read is known (for `--watch`).
    let names: Vec<String> = w
        .files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for n in ["shop.wsdl", "money.xsd", "ArticleService.xsd"] {
        assert!(names.iter().any(|x| x == n), "{n} in {names:?}");
    }
    let v = WsdlValidator::new(Arc::new(w), None).unwrap();
    let buy = |id: &str, cur: &str| {
        envelope(
            SoapVersion::V12,
            &format!("<s:buy xmlns:s=\"urn:shop\"><id>{id}</id><price><money><amount>2.5</amount><currency>{cur}</currency></money></price></s:buy>"),
        )
    };
    v.check(buy("AB-12345", "EUR").as_bytes(), false).unwrap();
    assert!(v.check(buy("AB-1234", "EUR").as_bytes(), false).is_err());
    assert!(v.check(buy("AB-12345", "GBP").as_bytes(), false).is_err());
}

#[test]
fn rpc_literal_wrappers_are_validated() {
    let wsdl = r#"<definitions xmlns="http://schemas.xmlsoap.org/wsdl/" xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/"
    xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:tns="urn:calc" targetNamespace="urn:calc">
  <message name="AddIn"><part name="a" type="xsd:int"/><part name="b" type="xsd:int"/></message>
  <message name="AddOut"><part name="sum" type="xsd:int"/></message>
  <portType name="PT"><operation name="add"><input message="tns:AddIn"/><output message="tns:AddOut"/></operation></portType>
  <binding name="B" type="tns:PT">
    <soap:binding style="rpc" transport="http://schemas.xmlsoap.org/soap/http"/>
    <operation name="add"><soap:operation soapAction="add"/>
      <input><soap:body use="literal" namespace="urn:calc"/></input>
      <output><soap:body use="literal" namespace="urn:calc"/></output>
    </operation>
  </binding>
  <service name="Calc"><port name="P" binding="tns:B"><soap:address location="http://localhost:1/calc"/></port></service>
</definitions>"#;
    let dir = tempfile::tempdir().unwrap();
    let v = validator(&write_wsdl(dir.path(), "calc.wsdl", wsdl));
    let add = |body: &str| {
        envelope(
            SoapVersion::V11,
            &format!("<c:add xmlns:c=\"urn:calc\">{body}</c:add>"),
        )
    };
    v.check(add("<a>1</a><b>2</b>").as_bytes(), false).unwrap();
    assert!(v.check(add("<a>1</a>").as_bytes(), false).is_err());
    assert!(v.check(add("<a>x</a><b>2</b>").as_bytes(), false).is_err());
    let out = envelope(
        SoapVersion::V11,
        "<c:addResponse xmlns:c=\"urn:calc\"><sum>3</sum></c:addResponse>",
    );
    v.check(out.as_bytes(), true).unwrap();
}

#[test]
fn encoded_wsdls_are_rejected_at_load() {
    let wsdl = r#"<definitions xmlns="http://schemas.xmlsoap.org/wsdl/" xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/"
    xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:tns="urn:calc" targetNamespace="urn:calc">
  <message name="AddIn"><part name="a" type="xsd:int"/></message>
  <portType name="PT"><operation name="add"><input message="tns:AddIn"/></operation></portType>
  <binding name="B" type="tns:PT">
    <soap:binding style="rpc" transport="http://schemas.xmlsoap.org/soap/http"/>
    <operation name="add"><input><soap:body use="encoded" namespace="urn:calc"/></input></operation>
  </binding>
  <service name="Calc"><port name="P" binding="tns:B"><soap:address location="http://localhost:1/calc"/></port></service>
</definitions>"#;
    let dir = tempfile::tempdir().unwrap();
    let e = Wsdl::load(&write_wsdl(dir.path(), "enc.wsdl", wsdl)).unwrap_err();
    assert!(e.contains("encoded"), "{e}");
}

#[test]
fn wsdl_imports_of_other_wsdls_resolve() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("parts")).unwrap();
    // Types, messages, portType and binding in an imported WSDL in a sub-folder; the service in
    // the main one, in another namespace.
    std::fs::write(
        dir.path().join("parts/abstract.wsdl"),
        r#"<definitions xmlns="http://schemas.xmlsoap.org/wsdl/" xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/"
    xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:a="urn:abstract" targetNamespace="urn:abstract">
  <types><xsd:schema targetNamespace="urn:abstract"><xsd:element name="ping" type="xsd:int"/><xsd:element name="pong" type="xsd:int"/></xsd:schema></types>
  <message name="In"><part name="p" element="a:ping"/></message>
  <message name="Out"><part name="p" element="a:pong"/></message>
  <portType name="PT"><operation name="ping"><input message="a:In"/><output message="a:Out"/></operation></portType>
  <binding name="B" type="a:PT"><soap:binding style="document" transport="http://schemas.xmlsoap.org/soap/http"/>
    <operation name="ping"><soap:operation soapAction="ping"/><input><soap:body use="literal"/></input><output><soap:body use="literal"/></output></operation>
  </binding>
</definitions>"#,
    )
    .unwrap();
    let main = r#"<definitions xmlns="http://schemas.xmlsoap.org/wsdl/" xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/"
    xmlns:a="urn:abstract" targetNamespace="urn:concrete">
  <import namespace="urn:abstract" location="parts/abstract.wsdl"/>
  <service name="Ping"><port name="P" binding="a:B"><soap:address location="http://localhost:1/ping"/></port></service>
</definitions>"#;
    let v = validator(&write_wsdl(dir.path(), "main.wsdl", main));
    let ping = |n: &str| {
        envelope(
            SoapVersion::V11,
            &format!("<a:ping xmlns:a=\"urn:abstract\">{n}</a:ping>"),
        )
    };
    v.check(ping("1").as_bytes(), false).unwrap();
    assert!(v.check(ping("one").as_bytes(), false).is_err());
}

#[test]
fn the_xml_namespace_schema_ships_with_the_gateway() {
    // Imports the XML namespace by its W3C URL: must not be fetched (no network here).
    let wsdl = r#"<definitions xmlns="http://schemas.xmlsoap.org/wsdl/" xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/"
    xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:t="urn:t" targetNamespace="urn:t">
  <types><xsd:schema targetNamespace="urn:t">
    <xsd:import namespace="http://www.w3.org/XML/1998/namespace" schemaLocation="http://www.w3.org/2001/xml.xsd"/>
    <xsd:element name="text"><xsd:complexType><xsd:simpleContent><xsd:extension base="xsd:string">
      <xsd:attribute ref="xml:lang" use="required"/>
    </xsd:extension></xsd:simpleContent></xsd:complexType></xsd:element>
  </xsd:schema></types>
  <message name="In"><part name="p" element="t:text"/></message>
  <portType name="PT"><operation name="say"><input message="t:In"/></operation></portType>
  <binding name="B" type="t:PT"><soap:binding style="document" transport="http://schemas.xmlsoap.org/soap/http"/>
    <operation name="say"><input><soap:body use="literal"/></input></operation></binding>
  <service name="S"><port name="P" binding="t:B"><soap:address location="http://localhost:1/s"/></port></service>
</definitions>"#;
    let dir = tempfile::tempdir().unwrap();
    let t = std::time::Instant::now();
    let v = validator(&write_wsdl(dir.path(), "t.wsdl", wsdl));
    assert!(t.elapsed() < std::time::Duration::from_secs(2));
    let say = |attrs: &str| {
        envelope(
            SoapVersion::V11,
            &format!("<t:text xmlns:t=\"urn:t\" {attrs}>hi</t:text>"),
        )
    };
    v.check(say("xml:lang=\"de\"").as_bytes(), false).unwrap();
    assert!(v.check(say("").as_bytes(), false).is_err());
}

#[test]
fn operations_with_empty_messages_accept_an_empty_body() {
    let wsdl = r#"<definitions xmlns="http://schemas.xmlsoap.org/wsdl/" xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/"
    xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:t="urn:t" targetNamespace="urn:t">
  <types><xsd:schema targetNamespace="urn:t"><xsd:element name="reset" type="xsd:string"/></xsd:schema></types>
  <message name="In"><part name="p" element="t:reset"/></message>
  <message name="Empty"/>
  <portType name="PT"><operation name="reset"><input message="t:In"/><output message="t:Empty"/></operation></portType>
  <binding name="B" type="t:PT"><soap:binding style="document" transport="http://schemas.xmlsoap.org/soap/http"/>
    <operation name="reset"><input><soap:body use="literal"/></input><output><soap:body use="literal"/></output></operation></binding>
  <service name="S"><port name="P" binding="t:B"><soap:address location="http://localhost:1/s"/></port></service>
</definitions>"#;
    let dir = tempfile::tempdir().unwrap();
    let v = validator(&write_wsdl(dir.path(), "e.wsdl", wsdl));
    let empty = envelope(SoapVersion::V11, "");
    v.check(empty.as_bytes(), true).unwrap();
    assert!(v.check(empty.as_bytes(), false).is_err());
}
