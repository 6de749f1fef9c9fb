//! Differential tests of the fast path against libxml2: valid messages of the shared and the
//! benchmark WSDLs (and of a WSDL that uses every supported construct), randomly mutated; the
//! fast path may call a message valid only when libxml2 accepts it. Plus coverage checks
//! (the everyday messages do take the fast path) and a timing comparison (ignored).

use std::sync::Arc;

use proptest::prelude::*;

use super::{Fast, FastPath, Miss};
use crate::fetch::Location;
use crate::schema::Checked;
use crate::wsdl::tests::shared;
use crate::wsdl::Wsdl;

const S11: &str = "http://schemas.xmlsoap.org/soap/envelope/";
const S12: &str = "http://www.w3.org/2003/05/soap-envelope";
const XSI: &str = "http://www.w3.org/2001/XMLSchema-instance";

fn bench(name: &str) -> String {
    format!("{}/../../bench/configs/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A WSDL with every construct the fast path supports.
const FEATURES_WSDL: &str = r#"<wsdl:definitions xmlns:wsdl="http://schemas.xmlsoap.org/wsdl/" xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/" xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:tns="urn:features" targetNamespace="urn:features">
 <wsdl:types>
  <xsd:schema targetNamespace="urn:features" elementFormDefault="qualified">
   <xsd:simpleType name="Code"><xsd:restriction base="xsd:token"><xsd:pattern value="[A-Z]{2}\d{2}"/><xsd:pattern value="x+"/></xsd:restriction></xsd:simpleType>
   <xsd:simpleType name="Percent"><xsd:restriction base="xsd:decimal"><xsd:minInclusive value="0"/><xsd:maxExclusive value="100"/><xsd:fractionDigits value="2"/><xsd:totalDigits value="4"/></xsd:restriction></xsd:simpleType>
   <xsd:simpleType name="Small"><xsd:restriction base="xsd:unsignedByte"><xsd:maxInclusive value="10"/></xsd:restriction></xsd:simpleType>
   <xsd:simpleType name="Name"><xsd:restriction base="xsd:string"><xsd:minLength value="1"/><xsd:maxLength value="5"/></xsd:restriction></xsd:simpleType>
   <xsd:simpleType name="Color"><xsd:restriction base="xsd:normalizedString"><xsd:enumeration value="red"/><xsd:enumeration value="dark blue"/></xsd:restriction></xsd:simpleType>
   <xsd:complexType name="Price"><xsd:simpleContent><xsd:extension base="xsd:decimal"><xsd:attribute name="currency" type="xsd:string" use="required"/><xsd:attribute name="net" type="xsd:boolean"/></xsd:extension></xsd:simpleContent></xsd:complexType>
   <xsd:attributeGroup name="Meta"><xsd:attribute name="version" type="tns:Small"/><xsd:attribute name="code" type="tns:Code" form="qualified"/></xsd:attributeGroup>
   <xsd:group name="Contact"><xsd:choice><xsd:element name="email" type="xsd:string"/><xsd:element name="phone" type="xsd:string" maxOccurs="2"/></xsd:choice></xsd:group>
   <xsd:element name="note" type="tns:Name"/>
   <xsd:complexType name="Item">
     <xsd:sequence>
       <xsd:element name="name" type="tns:Name"/>
       <xsd:element name="price" type="tns:Price" nillable="true"/>
       <xsd:element name="share" type="tns:Percent" minOccurs="0"/>
       <xsd:element name="count" type="xsd:short" nillable="true" minOccurs="0"/>
       <xsd:group ref="tns:Contact" minOccurs="0"/>
       <xsd:element ref="tns:note" minOccurs="0" maxOccurs="unbounded"/>
       <xsd:element name="sub" type="tns:Item" minOccurs="0"/>
     </xsd:sequence>
     <xsd:attributeGroup ref="tns:Meta"/>
     <xsd:attribute name="id" type="xsd:int" use="required"/>
   </xsd:complexType>
   <xsd:element name="order">
     <xsd:complexType>
       <xsd:sequence>
         <xsd:choice maxOccurs="unbounded">
           <xsd:element name="item" type="tns:Item"/>
           <xsd:element name="gift" type="tns:Item"/>
         </xsd:choice>
         <xsd:element name="when" type="xsd:dateTime" minOccurs="0"/>
         <xsd:element name="at" type="xsd:time" minOccurs="0"/>
         <xsd:element name="ratio" type="xsd:double" minOccurs="0"/>
         <xsd:element name="weight" type="xsd:float" minOccurs="0"/>
         <xsd:element name="color" type="tns:Color" minOccurs="0"/>
         <xsd:element name="big" type="xsd:long" minOccurs="0"/>
         <xsd:element name="flag" minOccurs="0"><xsd:complexType/></xsd:element>
       </xsd:sequence>
     </xsd:complexType>
   </xsd:element>
   <xsd:element name="settings">
     <xsd:complexType>
       <xsd:all minOccurs="0">
         <xsd:element name="a" type="xsd:int"/>
         <xsd:element name="b" type="xsd:boolean" minOccurs="0"/>
         <xsd:element name="c" type="xsd:date"/>
       </xsd:all>
     </xsd:complexType>
   </xsd:element>
   <xsd:element name="done" type="xsd:string"/>
  </xsd:schema>
 </wsdl:types>
 <wsdl:message name="OrderIn"><wsdl:part name="p" element="tns:order"/></wsdl:message>
 <wsdl:message name="SettingsIn"><wsdl:part name="p" element="tns:settings"/></wsdl:message>
 <wsdl:message name="Out"><wsdl:part name="p" element="tns:done"/></wsdl:message>
 <wsdl:portType name="PT">
  <wsdl:operation name="order"><wsdl:input message="tns:OrderIn"/><wsdl:output message="tns:Out"/></wsdl:operation>
  <wsdl:operation name="configure"><wsdl:input message="tns:SettingsIn"/><wsdl:output message="tns:Out"/></wsdl:operation>
 </wsdl:portType>
 <wsdl:binding name="B" type="tns:PT">
  <soap:binding style="document" transport="http://schemas.xmlsoap.org/soap/http"/>
  <wsdl:operation name="order"><soap:operation soapAction="order"/><wsdl:input><soap:body use="literal"/></wsdl:input><wsdl:output><soap:body use="literal"/></wsdl:output></wsdl:operation>
  <wsdl:operation name="configure"><soap:operation soapAction="configure"/><wsdl:input><soap:body use="literal"/></wsdl:input><wsdl:output><soap:body use="literal"/></wsdl:output></wsdl:operation>
 </wsdl:binding>
 <wsdl:service name="S"><wsdl:port name="P" binding="tns:B"><soap:address location="http://localhost/x"/></wsdl:port></wsdl:service>
</wsdl:definitions>"#;

/// Types for `ArticleService.wsdl`, whose `ArticleType.xsd` is not among the shared files.
const ARTICLE_TYPE_XSD: &str = r#"<xsd:schema xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:c="http://predic8.com/common/1/" targetNamespace="http://predic8.com/material/1/">
  <xsd:import namespace="http://predic8.com/common/1/" schemaLocation="../wsdl/CommonDataTypes.xsd"/>
  <xsd:complexType name="ArticleType">
    <xsd:sequence>
      <xsd:element name="id" type="c:IdentifierType" minOccurs="0"/>
      <xsd:element name="name" type="xsd:string"/>
      <xsd:element name="description" type="xsd:string" minOccurs="0"/>
      <xsd:element name="price" type="c:MoneyType"/>
    </xsd:sequence>
  </xsd:complexType>
</xsd:schema>"#;

/// Body elements as (local name, namespace), sorted.
type Allowed = Vec<(String, String)>;

/// A loaded WSDL with what its validator allows, and a folder that keeps its files.
struct Case {
    wsdl: Arc<Wsdl>,
    /// Request and response body elements as (local name, namespace), sorted.
    allowed: (Allowed, Allowed),
    _dir: Option<tempfile::TempDir>,
}

fn case(location: Location, dir: Option<tempfile::TempDir>) -> Case {
    let wsdl = Arc::new(Wsdl::load(&location).unwrap());
    let mut allowed = (Vec::new(), Vec::new());
    for port in wsdl.ports(None).unwrap() {
        for op in &port.operations {
            if let Some((ns, l)) = op.body_element(false) {
                allowed.0.push((l, ns));
            }
            if let Some((ns, l)) = op.body_element(true) {
                allowed.1.push((l, ns));
            }
        }
    }
    for v in [&mut allowed.0, &mut allowed.1] {
        v.sort();
        v.dedup();
    }
    Case {
        wsdl,
        allowed,
        _dir: dir,
    }
}

fn features() -> Case {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("features.wsdl");
    std::fs::write(&p, FEATURES_WSDL).unwrap();
    case(Location::File(p), Some(dir))
}

fn articles() -> Case {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("wsdl")).unwrap();
    std::fs::create_dir(dir.path().join("validation")).unwrap();
    let read = |n: &str| std::fs::read(shared(n).to_string()).unwrap();
    let wsdl = dir.path().join("wsdl/ArticleService.wsdl");
    std::fs::write(&wsdl, read("ArticleService.wsdl")).unwrap();
    std::fs::write(
        dir.path().join("wsdl/CommonDataTypes.xsd"),
        read("ArticleService.xsd"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("validation/ArticleType.xsd"),
        ARTICLE_TYPE_XSD,
    )
    .unwrap();
    case(Location::File(wsdl), Some(dir))
}

fn person() -> Case {
    case(Location::File(bench("person-service.wsdl").into()), None)
}

fn env11(body: &str) -> String {
    format!("<s:Envelope xmlns:s=\"{S11}\"><s:Body>{body}</s:Body></s:Envelope>")
}

fn env12(body: &str) -> String {
    format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<e:Envelope xmlns:e=\"{S12}\">\n <e:Header><h:x xmlns:h=\"urn:h\" h:a=\"1\">t&amp;</h:x></e:Header>\n <e:Body>\n  {body}\n </e:Body>\n</e:Envelope>\n")
}

/// libxml2's verdict on a message as `WsdlValidator::check_streaming` makes it: the envelope's
/// structure, the first body element and the streaming schema validation.
fn libxml2_accepts(c: &Case, msg: &[u8], response: bool) -> bool {
    let Ok(env) = crate::validator::parse_envelope(msg) else {
        return false;
    };
    let allowed = if response { &c.allowed.1 } else { &c.allowed.0 };
    let Some(first) = env.body.first() else {
        return false;
    };
    let ns = first
        .get_namespace()
        .map(|n| n.get_href())
        .unwrap_or_default();
    if allowed.binary_search(&(first.get_name(), ns)).is_err() {
        return false;
    }
    let checked = c
        .wsdl
        .schema_set
        .validate_message(msg, &mut turnpike_xmlstream::NoWatch);
    matches!(checked, Ok(Checked::Valid))
}

fn libxml2_accepts_element(c: &Case, el: &[u8]) -> bool {
    matches!(
        c.wsdl
            .schema_set
            .validate_message(el, &mut turnpike_xmlstream::NoWatch),
        Ok(Checked::Valid)
    )
}

fn fast(c: &Case) -> &FastPath {
    c.wsdl.schema_set.fast()
}

/// Seed messages: (body content, response).
fn seeds(name: &str) -> Vec<(String, bool)> {
    let c = "xmlns:c=\"https://predic8.de/cities\"";
    let p = "xmlns:p=\"http://example.com/partner\"";
    let q = "xmlns:q=\"https://example.com/qualified\"";
    let a = "xmlns:a=\"http://predic8.com/wsdl/material/ArticleService/1/\"";
    let t = "xmlns:t=\"urn:features\"";
    let address = "<address><street>Main</street><houseNumber>1a</houseNumber><postalCode>53111</postalCode><city>Bonn</city><country>DE</country></address>";
    let article = "<article><id>AB-12345</id><name>Pen</name><description>blue</description><price><amount>1.50</amount><currency>EUR</currency></price></article>";
    let v: Vec<(String, bool)> = match name {
        "cities" => vec![
            (format!("<c:getCity {c}><name>Bonn</name></c:getCity>"), false),
            (format!("<c:getCityResponse {c}><country>DE</country><population>327000</population></c:getCityResponse>"), true),
        ],
        "partner" => vec![
            (format!("<p:getPartner {p}><id>42</id></p:getPartner>"), false),
            (format!("<p:getPartners {p}><city>Bonn</city><kind>PERSON</kind></p:getPartners>"), false),
            (format!("<p:getPartners {p}/>"), false),
            (format!("<p:createPartner {p}><name>A</name><birthDate>1990-04-01</birthDate><kind>COMPANY</kind>{address}</p:createPartner>"), false),
            (format!("<p:updatePartner {p}><id>7</id><name>A</name><birthDate>2000-02-29</birthDate><kind>PUBLIC_AUTHORITY</kind>{address}</p:updatePartner>"), false),
            (format!("<p:deletePartner {p}><id>-1</id></p:deletePartner>"), false),
            (format!("<p:getPartnerResponse {p}><partner><id>1</id><name>N</name><birthDate>1970-01-01</birthDate><phoneNumber>+49228123456</phoneNumber><kind>PERSON</kind><active>true</active><creditLimit>1000.50</creditLimit>{address}</partner></p:getPartnerResponse>"), true),
            (format!("<p:getPartnersResponse {p}><partners><id>1</id><name>a</name></partners><partners><id>2</id><name>b</name></partners></p:getPartnersResponse>"), true),
            (format!("<p:createPartnerResponse {p}><id>5</id></p:createPartnerResponse>"), true),
            (format!("<p:deletePartnerResponse {p}/>"), true),
        ],
        "qualified" => vec![
            (format!("<q:sendMessage {q}><q:text>hi</q:text><q:priority>1</q:priority></q:sendMessage>"), false),
            (String::from("<sendMessage xmlns=\"https://example.com/qualified\"><text>hi</text><priority>2</priority></sendMessage>"), false),
            (format!("<q:createOrder {q}><q:address><q:street>s</q:street><q:city>c</q:city></q:address><q:amount>3</q:amount></q:createOrder>"), false),
        ],
        "articles" => vec![
            (format!("<a:create {a}>{article}</a:create>"), false),
            (format!("<a:get {a}><id>XY-00001</id></a:get>"), false),
            (format!("<a:getAll {a}/>"), false),
            (format!("<a:createResponse {a}/>"), true),
            (format!("<a:getResponse {a}>{article}</a:getResponse>"), true),
            (format!("<a:getAllResponse {a}>{article}{article}</a:getAllResponse>"), true),
        ],
        "person" => vec![
            (String::from("<p:createPerson xmlns:p=\"https://turnpike.example/person\"><person><firstName>Jane</firstName><lastName>Doe</lastName><email>jane.doe@example.com</email><phone>+49228123456</phone><birthDate>1990-04-01</birthDate><gender>FEMALE</gender><nationality>DE</nationality><company>Example GmbH</company><height>172</height><newsletter>true</newsletter><hobby>chess</hobby><hobby>hiking</hobby><hobby>cooking</hobby><address><street>Hauptstrasse</street><houseNumber>12a</houseNumber><postalCode>53111</postalCode><city>Bonn</city><state>NRW</state><country>Germany</country><type>home</type></address></person></p:createPerson>"), false),
            (String::from("<p:createPersonResponse xmlns:p=\"https://turnpike.example/person\"><id>4711</id><status>created</status></p:createPersonResponse>"), true),
        ],
        _ => vec![
            (format!("<t:order {t}><t:item id=\"1\" version=\"3\" t:code=\"AB12\"><t:name>Pen</t:name><t:price currency=\"EUR\">1.50</t:price><t:share>12.5</t:share><t:count>7</t:count><t:phone>1</t:phone><t:phone>2</t:phone><t:note>hi</t:note><t:note>yo</t:note><t:sub id=\"2\"><t:name>Cap</t:name><t:price xmlns:xsi=\"{XSI}\" xsi:nil=\"true\" currency=\"USD\"/></t:sub></t:item><t:gift id=\"3\"><t:name>Box</t:name><t:price currency=\"EUR\" net=\"true\">0</t:price><t:email>a@b</t:email></t:gift><t:when>2024-01-02T03:04:05Z</t:when><t:at>10:00:00</t:at><t:ratio>1e10</t:ratio><t:weight>-1.5</t:weight><t:color>dark blue</t:color><t:big>-42</t:big><t:flag/></t:order>"), false),
            (format!("<t:order {t}><t:gift id=\"9\" t:code=\"xxx\"><t:name>B</t:name><t:price currency=\"\">7</t:price></t:gift></t:order>"), false),
            (format!("<t:settings {t}><t:c>2020-01-01</t:c><t:a>1</t:a></t:settings>"), false),
            (format!("<t:settings {t}><t:b>false</t:b><t:a>1</t:a><t:c>2020-01-01</t:c></t:settings>"), false),
            (format!("<t:settings {t}/>"), false),
            (format!("<t:done {t}>ok</t:done>"), true),
        ],
    };
    v
}

fn load(name: &str) -> Case {
    match name {
        "cities" => case(shared("cities.wsdl"), None),
        "partner" => case(shared("partner.wsdl"), None),
        "qualified" => case(shared("qualified-elements.wsdl"), None),
        "articles" => articles(),
        "person" => person(),
        _ => features(),
    }
}

const NAMES: [&str; 6] = [
    "cities",
    "partner",
    "qualified",
    "articles",
    "person",
    "features",
];

#[test]
fn every_seed_takes_the_fast_path_and_libxml2_agrees() {
    for name in NAMES {
        let c = load(name);
        for (body, response) in seeds(name) {
            let allowed = if response { &c.allowed.1 } else { &c.allowed.0 };
            for msg in [env11(&body), env12(&body)] {
                assert!(
                    libxml2_accepts(&c, msg.as_bytes(), response),
                    "{name}: {msg}"
                );
                assert_eq!(
                    fast(&c).check_envelope(msg.as_bytes(), allowed),
                    Fast::Valid,
                    "{name}: {msg}; skipped: {:?}",
                    fast(&c).skipped()
                );
            }
            assert_eq!(
                fast(&c).check_element(body.as_bytes()),
                Fast::Valid,
                "{body}"
            );
            // The wrong direction is never valid.
            let other = if response { &c.allowed.0 } else { &c.allowed.1 };
            assert_eq!(
                fast(&c).check_envelope(env11(&body).as_bytes(), other),
                Fast::Unsure(Miss::Operation)
            );
        }
    }
}

#[test]
fn benchmark_and_shared_messages_take_the_fast_path() {
    let c = person();
    let lua = std::fs::read_to_string(bench("soap-request.lua")).unwrap();
    let request = lua
        .lines()
        .find_map(|l| l.strip_prefix("wrk.body = '"))
        .and_then(|l| l.strip_suffix('\''))
        .unwrap();
    assert!(libxml2_accepts(&c, request.as_bytes(), false));
    assert_eq!(
        fast(&c).check_envelope(request.as_bytes(), &c.allowed.0),
        Fast::Valid
    );
    let nginx = std::fs::read_to_string(bench("nginx-backend.conf")).unwrap();
    let response = nginx
        .lines()
        .filter(|l| l.contains("createPersonResponse"))
        .find_map(|l| l.split_once("return 200 '"))
        .and_then(|(_, r)| r.strip_suffix("';"))
        .unwrap();
    assert!(libxml2_accepts(&c, response.as_bytes(), true));
    assert_eq!(
        fast(&c).check_envelope(response.as_bytes(), &c.allowed.1),
        Fast::Valid
    );
    let cities = load("cities");
    let city = std::fs::read(shared("city.soap.xml").to_string()).unwrap();
    assert!(libxml2_accepts(&cities, &city, false));
    assert_eq!(
        fast(&cities).check_envelope(&city, &cities.allowed.0),
        Fast::Valid
    );
    // The invalid sample is not.
    let bad = std::fs::read(shared("invalid-city.soap.xml").to_string()).unwrap();
    assert_eq!(
        fast(&cities).check_envelope(&bad, &cities.allowed.0),
        Fast::Unsure(Miss::Structure)
    );
}

#[test]
fn each_miss_says_why_and_is_counted() {
    let schema = r#"<xsd:schema xmlns:xsd="http://www.w3.org/2001/XMLSchema" targetNamespace="urn:t">
        <xsd:element name="ok" type="xsd:int"/>
        <xsd:element name="r"><xsd:complexType><xsd:sequence><xsd:element name="a" type="xsd:int"/></xsd:sequence><xsd:attribute name="n" type="xsd:int"/></xsd:complexType></xsd:element>
        <xsd:element name="any" type="xsd:anyType"/>
    </xsd:schema>"#;
    let f = FastPath::compile(&[crate::xml::parse(schema.as_bytes()).unwrap()]);
    let r = |inner: &str, attrs: &str| format!(r#"<t:r xmlns:t="urn:t"{attrs}>{inner}</t:r>"#);
    let counted = |m: Miss| {
        turnpike_telemetry::stats::process().soap_fast_misses[m as usize]
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    for (doc, want) in [
        (r("<a>1</a>", ""), Fast::Valid),
        (r("<a>1</a>", r#" n="2""#), Fast::Valid),
        (
            format!("<!-- c -->{}", r("<a>1</a>", "")),
            Fast::Unsure(Miss::Markup),
        ),
        (r("<a><![CDATA[1]]></a>", ""), Fast::Unsure(Miss::Markup)),
        (
            r#"<t:any xmlns:t="urn:t"/>"#.into(),
            Fast::Unsure(Miss::NotCompiled),
        ),
        (r("<b>1</b>", ""), Fast::Unsure(Miss::Structure)),
        (r("", ""), Fast::Unsure(Miss::Structure)),
        (r("<a>one</a>", ""), Fast::Unsure(Miss::Value)),
        (r("<a>1</a>", r#" n="x""#), Fast::Unsure(Miss::Value)),
        (r("<a>1</a>", r#" m="1""#), Fast::Unsure(Miss::Attribute)),
        (r("text<a>1</a>", ""), Fast::Unsure(Miss::Text)),
    ] {
        let before = match want {
            Fast::Unsure(m) => counted(m),
            Fast::Valid => 0,
        };
        assert_eq!(f.check_element(doc.as_bytes()), want, "{doc}");
        if let Fast::Unsure(m) = want {
            assert!(counted(m) > before, "{doc}: {m:?} counted");
        }
    }
    let allowed = vec![("r".to_owned(), "urn:t".to_owned())];
    let body = r("<a>1</a>", "");
    let s11 = "http://schemas.xmlsoap.org/soap/envelope/";
    for (env, want) in [
        (env11(&body), Fast::Valid),
        (
            env11(r#"<t:ok xmlns:t="urn:t">1</t:ok>"#),
            Fast::Unsure(Miss::Operation),
        ),
        (
            format!(
                r#"<s:Envelope xmlns:s="{s11}"><s:Body>{body}</s:Body><s:Header/></s:Envelope>"#
            ),
            Fast::Unsure(Miss::Envelope),
        ),
        (
            format!(r#"<s:Letter xmlns:s="{s11}"/>"#),
            Fast::Unsure(Miss::Envelope),
        ),
    ] {
        assert_eq!(f.check_envelope(env.as_bytes(), &allowed), want, "{env}");
    }
    assert_eq!(Miss::NotCompiled.label(), "not-compiled");
    assert_eq!(Miss::Conversion.label(), "conversion");
}

#[test]
fn every_global_element_of_the_test_wsdls_is_compiled() {
    for name in NAMES {
        let c = load(name);
        assert!(
            fast(&c).skipped().is_empty(),
            "{name}: {:?}",
            fast(&c).skipped()
        );
    }
}

#[test]
fn unsupported_constructs_are_left_to_libxml2() {
    let schema = |body: &str| {
        format!(
            "<xsd:schema xmlns:xsd=\"http://www.w3.org/2001/XMLSchema\" xmlns:t=\"urn:t\" targetNamespace=\"urn:t\">{body}<xsd:element name=\"ok\" type=\"xsd:int\"/></xsd:schema>"
        )
    };
    for body in [
        r#"<xsd:element name="x"><xsd:complexType mixed="true"><xsd:sequence><xsd:element name="a" type="xsd:int"/></xsd:sequence></xsd:complexType></xsd:element>"#,
        r#"<xsd:element name="x"><xsd:complexType><xsd:sequence><xsd:any/></xsd:sequence></xsd:complexType></xsd:element>"#,
        r#"<xsd:element name="x"><xsd:complexType><xsd:anyAttribute/></xsd:complexType></xsd:element>"#,
        r#"<xsd:element name="x" type="xsd:anyType"/>"#,
        r#"<xsd:element name="x"/>"#,
        r#"<xsd:element name="x" type="xsd:duration"/>"#,
        r#"<xsd:element name="x" type="xsd:int" default="1"/>"#,
        r#"<xsd:element name="x" type="xsd:int" fixed="1"/>"#,
        r#"<xsd:element name="x" type="xsd:int" substitutionGroup="t:ok"/>"#,
        r#"<xsd:element name="x" type="xsd:int" abstract="true"/>"#,
        r#"<xsd:element name="x"><xsd:simpleType><xsd:list itemType="xsd:int"/></xsd:simpleType></xsd:element>"#,
        r#"<xsd:element name="x"><xsd:simpleType><xsd:union memberTypes="xsd:int xsd:date"/></xsd:simpleType></xsd:element>"#,
        r#"<xsd:element name="x"><xsd:simpleType><xsd:restriction base="xsd:string"><xsd:pattern value="\w+"/></xsd:restriction></xsd:simpleType></xsd:element>"#,
        r#"<xsd:element name="x"><xsd:simpleType><xsd:restriction base="xsd:int"><xsd:enumeration value="1"/></xsd:restriction></xsd:simpleType></xsd:element>"#,
        r#"<xsd:element name="x"><xsd:simpleType><xsd:restriction base="xsd:date"><xsd:minInclusive value="2000-01-01"/></xsd:restriction></xsd:simpleType></xsd:element>"#,
        r#"<xsd:element name="x"><xsd:complexType><xsd:complexContent><xsd:extension base="t:B"/></xsd:complexContent></xsd:complexType></xsd:element><xsd:complexType name="B"/>"#,
        r#"<xsd:element name="x"><xsd:complexType><xsd:sequence maxOccurs="2"><xsd:element name="a" type="xsd:int"/></xsd:sequence></xsd:complexType></xsd:element>"#,
        r#"<xsd:element name="x"><xsd:complexType><xsd:choice><xsd:element name="a" type="xsd:int"/><xsd:element name="a" type="xsd:string"/></xsd:choice></xsd:complexType></xsd:element>"#,
        r#"<xsd:element name="x"><xsd:complexType><xsd:sequence><xsd:element name="a" type="xsd:int"/></xsd:sequence></xsd:complexType><xsd:key name="k"><xsd:selector xpath="a"/><xsd:field xpath="."/></xsd:key></xsd:element>"#,
        r#"<xsd:element name="x" type="t:Missing"/>"#,
        r#"<xsd:element name="x"><xsd:complexType><xsd:sequence maxOccurs="unbounded"><xsd:element name="a" type="xsd:int" maxOccurs="2"/></xsd:sequence></xsd:complexType></xsd:element>"#,
        r#"<xsd:element name="x"><xsd:complexType><xsd:attribute name="a" type="xsd:int" fixed="1"/></xsd:complexType></xsd:element>"#,
        r#"<xsd:element name="x"><xsd:complexType><xsd:attribute ref="xml:lang"/></xsd:complexType></xsd:element>"#,
    ] {
        let doc = crate::xml::parse(schema(body).as_bytes()).unwrap();
        let f = FastPath::compile(&[doc]);
        assert!(!f.is_compiled("urn:t", "x"), "{body}");
        assert!(f.is_compiled("urn:t", "ok"), "{body}");
    }
    // Two documents of one namespace: libxml2 may see only one of them.
    let doc = crate::xml::parse(schema("").as_bytes()).unwrap();
    let f = FastPath::compile(&[doc.clone(), doc]);
    assert!(!f.is_compiled("urn:t", "ok"));
}

/// A start and end tag of an element in a (mostly) well-formed document.
#[derive(Debug, Clone)]
struct Tag {
    /// Byte range of the start tag.
    open: (usize, usize),
    /// Byte range of the end tag (the start tag's for an empty-element tag).
    close: (usize, usize),
    /// The name as written.
    name: String,
}

fn tags(s: &str) -> Vec<Tag> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut stack: Vec<(usize, usize, String)> = Vec::new();
    let mut i = 0;
    while let Some(p) = s[i..].find('<') {
        let start = i + p;
        let Some(e) = s[start..].find('>') else { break };
        let end = start + e + 1;
        i = end;
        match b.get(start + 1) {
            Some(b'/') => {
                if let Some((os, oe, name)) = stack.pop() {
                    out.push(Tag {
                        open: (os, oe),
                        close: (start, end),
                        name,
                    });
                }
            }
            Some(b'!' | b'?') => {}
            _ => {
                let name: String = s[start + 1..end - 1]
                    .split(|c: char| c.is_whitespace() || c == '/')
                    .next()
                    .unwrap_or("")
                    .to_owned();
                if b[end - 2] == b'/' {
                    out.push(Tag {
                        open: (start, end),
                        close: (start, end),
                        name,
                    });
                } else {
                    stack.push((start, end, name));
                }
            }
        }
    }
    out.sort_by_key(|t| t.open.0);
    out
}

const VALUES: &[&str] = &[
    "",
    " ",
    "0",
    "-0",
    "+1",
    "1",
    "01",
    " 42 ",
    "\n42\n",
    "\t7\r\n",
    "2147483647",
    "2147483648",
    "-2147483648",
    "-2147483649",
    "32767",
    "32768",
    "-32769",
    "255",
    "256",
    "10",
    "11",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "123456789012345678",
    "1.5",
    "1.",
    ".5",
    "-1.50",
    "99.99",
    "100",
    "99.999",
    "0.00",
    "12.345",
    "1e5",
    "1E-3",
    "INF",
    "-INF",
    "NaN",
    "+INF",
    "1e39",
    "1e400",
    "true",
    "false",
    "TRUE",
    " true ",
    "1990-04-01",
    "1990-02-30",
    "2000-02-29",
    "1900-02-29",
    "1990-04-01Z",
    "1990-04-01+14:00",
    "1990-04-01+13:59",
    "1990-04-01-05:00",
    "0000-01-01",
    "-0001-01-01",
    "12345-01-01",
    "1990-04-01T12:00:00",
    "2024-01-02T24:00:00",
    "1990-04-01T12:00:00.123456789Z",
    "12:00:00",
    "23:59:60",
    "FEMALE",
    " FEMALE",
    "MALE ",
    "PERSON",
    "COMPANY",
    "EUR",
    "USD",
    "AB-12345",
    "AB-1234",
    "ab-12345",
    "AB-1234\u{665}",
    "53111",
    "5311",
    "ab",
    "A&amp;B",
    "&lt;",
    "&#65;",
    "&#x1F600;",
    "&#0;",
    "&#x0;",
    "&foo;",
    "&amp",
    "a]]>b",
    "<!-- c -->",
    "<![CDATA[x]]>",
    "<?pi x?>",
    "x\r\ny",
    "x\ry",
    "\t",
    "é",
    "\u{FFFE}",
    "\u{1}",
    "dark blue",
    "dark  blue",
    "dark\tblue",
    "red",
    "AB12",
    "xxx",
    "x",
    "xx x",
    "+49228123456",
    "++49",
    "12345",
    "&#10;",
    "&#13;",
    "a\u{a0}",
    "<x/>",
    "<name>a</name>",
    "<t:note xmlns:t=\"urn:features\">n</t:note>",
];

const ATTRS: &[&str] = &[
    " x=\"1\"",
    " id=\"5\"",
    " id=\"five\"",
    " id='6'",
    " version=\"10\"",
    " version=\"11\"",
    " version=\" 3 \"",
    " currency=\"EUR\"",
    " net=\"0\"",
    " net=\"maybe\"",
    " t:code=\"ZZ99\"",
    " t:code=\"zz\"",
    " code=\"AB12\"",
    " xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xsi:nil=\"true\"",
    " xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xsi:nil=\"false\"",
    " xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xsi:type=\"xsd:string\"",
    " xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xsi:schemaLocation=\"a b\"",
    " xml:lang=\"en\"",
    " x=\"1\" x=\"2\"",
    " x=\"&amp;\"",
    " x=\"&bad;\"",
    " x=\"a\tb\r\nc\"",
    " x=\"<\"",
    " x=1",
    "x=\"1\"",
    " xmlns=\"urn:other\"",
    " xmlns=\"\"",
    " xmlns:z=\"urn:z\" z:a=\"1\"",
];

const SNIPPETS: &[&str] = &[
    " ",
    "\n",
    "\r\n",
    "\t",
    "<!--c-->",
    "&amp;",
    "&#x20;",
    "&#32;",
    "<x/>",
    "&#13;",
    "]]>",
    "<",
    "&",
    "\u{1}",
    "<?pi?>",
    "<![CDATA[ ]]>",
    "x",
    "é",
    "<!DOCTYPE x>",
];

const RENAMES: &[&str] = &[
    "name",
    "id",
    "city",
    "kind",
    "person",
    "hobby",
    "address",
    "street",
    "foo",
    "t:item",
    "t:gift",
    "t:note",
    "t:name",
    "q:text",
    "p:getPartner",
    "s:Body",
    "s:Header",
    "note",
    "a",
];

/// Applies one mutation to `msg` (`op` picks it, `a`, `b` and `v` pick positions and values).
fn mutate(msg: &mut String, op: u8, a: usize, b: usize, v: usize) {
    let tags: Vec<Tag> = tags(msg)
        .into_iter()
        .filter(|t| {
            msg.get(t.close.0 + 2..)
                .is_some_and(|rest| t.open == t.close || rest.starts_with(&t.name))
        })
        .collect();
    let pick = |i: usize| tags.get(i % tags.len().max(1)).cloned();
    let at_char = |s: &str, i: usize| {
        let mut i = i % (s.len() + 1);
        while !s.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    match op % 10 {
        0 => {
            // new text content of a leaf
            if let Some(t) = pick(a) {
                if t.open != t.close {
                    msg.replace_range(t.open.1..t.close.0, VALUES[v % VALUES.len()]);
                }
            }
        }
        1 => {
            if let Some(t) = pick(a) {
                msg.replace_range(t.open.0..t.close.1, "");
            }
        }
        2 => {
            if let Some(t) = pick(a) {
                let copy = msg[t.open.0..t.close.1].to_owned();
                msg.insert_str(t.close.1, &copy);
            }
        }
        3 => {
            // move an element after another (not into itself)
            if let (Some(x), Some(y)) = (pick(a), pick(b)) {
                let inside = y.open.0 >= x.open.0 && y.close.1 <= x.close.1;
                let around = x.open.0 >= y.open.0 && x.close.1 <= y.close.1;
                if !inside && !around {
                    let piece = msg[x.open.0..x.close.1].to_owned();
                    if y.close.1 > x.close.1 {
                        msg.insert_str(y.close.1, &piece);
                        msg.replace_range(x.open.0..x.close.1, "");
                    } else {
                        msg.replace_range(x.open.0..x.close.1, "");
                        msg.insert_str(y.close.1, &piece);
                    }
                }
            }
        }
        4 => {
            if let Some(t) = pick(a) {
                let new = RENAMES[v % RENAMES.len()];
                if t.open != t.close {
                    msg.replace_range(t.close.0 + 2..t.close.0 + 2 + t.name.len(), new);
                }
                msg.replace_range(t.open.0 + 1..t.open.0 + 1 + t.name.len(), new);
            }
        }
        5 => {
            if let Some(t) = pick(a) {
                msg.insert_str(t.open.0 + 1 + t.name.len(), ATTRS[v % ATTRS.len()]);
            }
        }
        6 => {
            let i = at_char(msg, b);
            msg.insert_str(i, SNIPPETS[v % SNIPPETS.len()]);
        }
        7 => {
            // qualify or unqualify a name
            if let Some(t) = pick(a) {
                let local = t.name.rsplit(':').next().unwrap_or("").to_owned();
                let new = if t.name.contains(':') {
                    local
                } else {
                    format!("t:{local}")
                };
                if t.open != t.close {
                    msg.replace_range(t.close.0 + 2..t.close.0 + 2 + t.name.len(), &new);
                }
                msg.replace_range(t.open.0 + 1..t.open.0 + 1 + t.name.len(), &new);
            }
        }
        8 => {
            // whitespace around a leaf's text
            if let Some(t) = pick(a) {
                if t.open != t.close && !msg[t.open.1..t.close.0].contains('<') {
                    msg.insert_str(t.close.0, [" ", "\n", "\t ", "\r\n"][v % 4]);
                    msg.insert_str(t.open.1, [" ", "\n", "", "\r\n"][b % 4]);
                }
            }
        }
        _ => {
            // delete a byte range
            let i = at_char(msg, a);
            let j = at_char(msg, i + b % 12).max(i);
            msg.replace_range(i..j, "");
        }
    }
}

fn mutated(name: &'static str) -> impl Strategy<Value = (String, bool, bool)> {
    let seeds = seeds(name);
    let n = seeds.len();
    (
        0..n,
        any::<bool>(),
        proptest::collection::vec(
            (any::<u8>(), any::<usize>(), any::<usize>(), any::<usize>()),
            1..4,
        ),
    )
        .prop_map(move |(i, v12, ops)| {
            let (body, response) = &seeds[i];
            let mut msg = if v12 { env12(body) } else { env11(body) };
            for (op, a, b, v) in ops {
                mutate(&mut msg, op, a, b, v);
            }
            (msg, *response, v12)
        })
}

/// Runs the differential property for one WSDL and checks that enough mutants stay valid.
fn differential(name: &'static str, cases: u32) {
    let c = load(name);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let valid = std::cell::Cell::new(0u32);
    let result = runner.run(&mutated(name), |(msg, response, _)| {
        let allowed = if response { &c.allowed.1 } else { &c.allowed.0 };
        if fast(&c).check_envelope(msg.as_bytes(), allowed) == Fast::Valid {
            valid.set(valid.get() + 1);
            prop_assert!(
                libxml2_accepts(&c, msg.as_bytes(), response),
                "fast path said valid, libxml2 refuses: {msg}"
            );
        }
        // The body element alone (as wsdl2openapi validates it).
        let tags = tags(&msg);
        if let Some(body) = tags
            .iter()
            .find(|t| t.name.ends_with(":Body") && t.open != t.close)
        {
            let inner = msg[body.open.1..body.close.0].trim();
            if fast(&c).check_element(inner.as_bytes()) == Fast::Valid {
                prop_assert!(
                    libxml2_accepts_element(&c, inner.as_bytes()),
                    "fast path said valid, libxml2 refuses the element: {inner}"
                );
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
    // Not trivially unsure: a good share of the mutants stays valid.
    let valid = valid.get();
    assert!(
        valid > cases / 20,
        "{name}: only {valid} of {cases} fast-valid"
    );
}

#[test]
fn differential_cities() {
    differential("cities", 1000);
}

#[test]
fn differential_partner() {
    differential("partner", 1500);
}

#[test]
fn differential_qualified() {
    differential("qualified", 1000);
}

#[test]
fn differential_articles() {
    differential("articles", 1000);
}

#[test]
fn differential_person() {
    differential("person", 1500);
}

#[test]
fn differential_features() {
    differential("features", 3000);
}

/// Times the fast path and libxml2 on the benchmark request:
/// `cargo test -p turnpike-soap --release -- --ignored --nocapture fast_path_timing`.
#[test]
#[ignore]
fn fast_path_timing() {
    let c = person();
    let lua = std::fs::read_to_string(bench("soap-request.lua")).unwrap();
    let request = lua
        .lines()
        .find_map(|l| l.strip_prefix("wrk.body = '"))
        .and_then(|l| l.strip_suffix('\''))
        .unwrap()
        .as_bytes()
        .to_vec();
    let n = 100_000;
    let t = std::time::Instant::now();
    for _ in 0..n {
        assert_eq!(
            fast(&c).check_envelope(std::hint::black_box(&request), &c.allowed.0),
            Fast::Valid
        );
    }
    let quick = t.elapsed().as_secs_f64() * 1e6 / f64::from(n);
    let mut padded = request.clone();
    padded.resize(request.len() + 250, b' ');
    let t = std::time::Instant::now();
    for _ in 0..n {
        let r = c.wsdl.schema_set.validate_message(
            std::hint::black_box(&padded),
            &mut turnpike_xmlstream::NoWatch,
        );
        assert!(matches!(r, Ok(Checked::Valid)));
    }
    let slow = t.elapsed().as_secs_f64() * 1e6 / f64::from(n);
    println!("fast path: {quick:.3} µs/message, libxml2: {slow:.3} µs/message");
}
