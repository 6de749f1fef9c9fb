use std::sync::Arc;

use http::Method;
use serde_json::json;

use super::*;
use crate::fetch::Location;
use crate::wsdl::Wsdl;

fn compile(name: &str, prefix: &str) -> Wsdl2OpenApi {
    let w = Wsdl::load(&crate::wsdl::tests::shared(name)).unwrap();
    Wsdl2OpenApi::from_wsdl(&Wsdl2OpenApiSettings::default(), Arc::new(w), prefix).unwrap()
}

#[test]
fn kebab() {
    assert_eq!(kebab_case("createPerson"), "create-person");
    assert_eq!(kebab_case("getCity"), "get-city");
    assert_eq!(kebab_case("getHTTPStatus"), "get-http-status");
    assert_eq!(kebab_case("Get_all2Items"), "get-all2-items");
}

#[test]
fn json_to_soap_and_back() {
    let p = compile("cities.wsdl", "");
    let (i, _) = p.find(&Method::POST, "/get-city").unwrap();
    let x = p
        .request_xml(&p.ops[i], &json!({"name": "Berlin & Co"}))
        .unwrap();
    assert!(x.contains("<ns0:getCity"), "{x}");
    assert!(x.contains("<name>Berlin &amp; Co</name>"), "{x}");
    assert!(p.request_xml(&p.ops[i], &json!({"nom": "x"})).is_err());
    assert!(p
        .request_xml(&p.ops[i], &json!({"name": ["a", "b"]}))
        .is_err());
    let resp = b"<s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'><s:Body><c:getCityResponse xmlns:c='https://predic8.de/cities'><country>Germany</country><population>3645000</population></c:getCityResponse></s:Body></s:Envelope>";
    let v = p.response_json(&p.ops[i], resp).unwrap();
    assert_eq!(v, json!({"country": "Germany", "population": 3645000}));
    assert!(p.find(&Method::GET, "/get-city").unwrap_err());
    assert!(!p.find(&Method::POST, "/nope").unwrap_err());
}

#[test]
fn everyday_responses_convert_in_one_pass() {
    let p = compile("partner.wsdl", "");
    let (i, _) = p.find(&Method::POST, "/get-partners").unwrap();
    let op = &p.ops[i];
    let one = b"<?xml version='1.0' encoding='UTF-8'?><s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'><s:Header/><s:Body><p:getPartnersResponse xmlns:p='http://example.com/partner'><partners><id>7</id><name>A &amp; B</name></partners></p:getPartnersResponse></s:Body></s:Envelope>";
    let output = op.output.as_ref().map(|o| &o.typ);
    let v = super::stream::response_json(&p.model, output, one).unwrap();
    assert_eq!(v, json!({"partners": [{"id": 7, "name": "A & B"}]}));
    // Faults and malformed messages are left to the tree conversion.
    let f = b"<s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'><s:Body><s:Fault><faultcode>s:Client</faultcode></s:Fault></s:Body></s:Envelope>";
    assert!(super::stream::response_json(&p.model, output, f).is_none());
    assert!(super::stream::response_json(&p.model, output, b"<a><b></a>").is_none());
}

#[test]
fn faults_become_problems() {
    let p = compile("cities.wsdl", "");
    let f = b"<s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'><s:Body><s:Fault><faultcode>s:Client</faultcode><faultstring>bad city</faultstring><detail><reason>unknown</reason></detail></s:Fault></s:Body></s:Envelope>";
    let e = p.response_json(&p.ops[0], f).unwrap_err();
    assert_eq!(e.status, 400);
    let j = e.to_json();
    assert_eq!(j["faultstring"], "bad city");
    assert_eq!(j["faultdetail"]["reason"], "unknown");
    let f12 = b"<e:Envelope xmlns:e='http://www.w3.org/2003/05/soap-envelope'><e:Body><e:Fault><e:Code><e:Value>e:Receiver</e:Value></e:Code><e:Reason><e:Text xml:lang='en'>down</e:Text></e:Reason></e:Fault></e:Body></e:Envelope>";
    let e = p.response_json(&p.ops[0], f12).unwrap_err();
    assert_eq!(e.status, 502);
    assert_eq!(e.to_json()["faultcode"], "e:Receiver");
}

#[test]
fn arrays_types_and_openapi() {
    let p = compile("partner.wsdl", "/api");
    let (i, _) = p.find(&Method::POST, "/get-partners").unwrap();
    let one = b"<s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'><s:Body><p:getPartnersResponse xmlns:p='http://example.com/partner'><partners><id>7</id><name>A</name></partners></p:getPartnersResponse></s:Body></s:Envelope>";
    let v = p.response_json(&p.ops[i], one).unwrap();
    assert_eq!(v, json!({"partners": [{"id": 7, "name": "A"}]}));
    let (i, _) = p.find(&Method::POST, "/get-partner").unwrap();
    let full = b"<s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'><s:Body><p:getPartnerResponse xmlns:p='http://example.com/partner'><partner><id>7</id><name>A</name><kind>COMPANY</kind><active>true</active><creditLimit>1500.50</creditLimit><address><street>s</street><houseNumber>1a</houseNumber><postalCode>53111</postalCode><city>Bonn</city><country>DE</country></address></partner></p:getPartnerResponse></s:Body></s:Envelope>";
    let v = p.response_json(&p.ops[i], full).unwrap();
    assert_eq!(v["partner"]["active"], true);
    assert_eq!(v["partner"]["creditLimit"], 1500.5);
    assert_eq!(v["partner"]["address"]["postalCode"], "53111");
    let doc: Value = serde_json::from_slice(&p.openapi).unwrap();
    assert_eq!(doc["servers"][0]["url"], "/api");
    let s = &doc["paths"]["/create-partner"]["post"]["requestBody"]["content"]["application/json"]
        ["schema"];
    assert_eq!(s["properties"]["kind"]["enum"][0], "PERSON");
    assert_eq!(s["properties"]["birthDate"]["format"], "date");
    assert!(s["required"].as_array().unwrap().contains(&json!("name")));
    let r = &doc["paths"]["/get-partners"]["post"]["responses"]["200"]["content"]
        ["application/json"]["schema"];
    assert_eq!(r["properties"]["partners"]["type"], "array");
}

/// The request element is validated alone: the verdicts and messages are those of the whole
/// envelope's validation.
#[test]
fn element_validation_matches_envelope_validation() {
    let p = compile("partner.wsdl", "");
    let (i, _) = p.find(&Method::POST, "/create-partner").unwrap();
    let op = &p.ops[i];
    let mut failures = 0;
    for content in [
        json!({"name": "A", "birthDate": "1990-04-01", "kind": "PERSON", "address": {
            "street": "s", "houseNumber": "1", "postalCode": "53111", "city": "Bonn", "country": "DE"
        }}),
        json!({"name": "A", "kind": "PERSON"}),
        json!({"kind": "PERSON"}),
        json!({"name": "A", "kind": "ALIEN"}),
        json!({"name": "A", "kind": "PERSON", "birthDate": "yesterday"}),
        json!({"name": "A", "kind": "PERSON", "address": {"city": "Bonn"}}),
        json!({"name": 42, "kind": "COMPANY", "birthDate": "2020-02-30"}),
    ] {
        let via_envelope =
            crate::validator::parse_envelope(p.request_xml(op, &content).unwrap().as_bytes())
                .map_err(|(m, _)| vec![m])
                .and_then(|env| {
                    env.body
                        .iter()
                        .try_for_each(|el| p.wsdl.schema_set.validate(el))
                });
        let mut element = p.request_element(op, &content).unwrap().into_bytes();
        let alone = crate::validator::parse_element_in(&mut element)
            .map_err(|m| vec![m])
            .and_then(|(_doc, root)| p.wsdl.schema_set.validate(&root));
        assert_eq!(via_envelope, alone, "{content}");
        failures += usize::from(alone.is_err());
        assert_eq!(
            element,
            p.request_element(op, &content).unwrap().into_bytes()
        );
    }
    assert_eq!(failures, 6);
    // Not well-formed (a wildcard property that is no XML name): the same message.
    let mut bad = b"<a><1x/></a>".to_vec();
    assert_eq!(
        crate::validator::parse_element_in(&mut bad).err().unwrap(),
        crate::validator::parse_envelope(b"<s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'><s:Body><1x/></s:Body></s:Envelope>").err().unwrap().0
    );
}

#[test]
fn rpc_literal_operations() {
    let wsdl = r#"<definitions xmlns="http://schemas.xmlsoap.org/wsdl/" xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/"
xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:tns="urn:calc" targetNamespace="urn:calc">
  <message name="AddIn"><part name="a" type="xsd:int"/><part name="b" type="xsd:int"/></message>
  <message name="AddOut"><part name="sum" type="xsd:int"/></message>
  <portType name="PT"><operation name="addNumbers"><input message="tns:AddIn"/><output message="tns:AddOut"/></operation></portType>
  <binding name="B" type="tns:PT">
<soap:binding style="rpc" transport="http://schemas.xmlsoap.org/soap/http"/>
<operation name="addNumbers"><soap:operation soapAction="urn:add"/>
  <input><soap:body use="literal" namespace="urn:calc"/></input>
  <output><soap:body use="literal" namespace="urn:calc"/></output>
</operation>
  </binding>
  <service name="Calc"><port name="P" binding="tns:B"><soap:address location="http://localhost:1/calc"/></port></service>
</definitions>"#;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("calc.wsdl");
    std::fs::write(&path, wsdl).unwrap();
    let w = Arc::new(Wsdl::load(&Location::File(path)).unwrap());
    let p = Wsdl2OpenApi::from_wsdl(&Wsdl2OpenApiSettings::default(), w, "").unwrap();
    let (i, _) = p.find(&Method::POST, "/add-numbers").unwrap();
    assert_eq!(p.ops[i].soap_action, "urn:add");
    let x = p
        .request_xml(&p.ops[i], &json!({"a": 1, "b": "2"}))
        .unwrap();
    assert!(
        x.contains("<ns0:addNumbers xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xmlns:ns0=\"urn:calc\"><a>1</a><b>2</b></ns0:addNumbers>"),
        "{x}"
    );
    let resp = b"<s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'><s:Body><c:addNumbersResponse xmlns:c='urn:calc'><sum>3</sum></c:addNumbersResponse></s:Body></s:Envelope>";
    assert_eq!(p.response_json(&p.ops[i], resp).unwrap(), json!({"sum": 3}));
}

#[test]
fn wildcards_take_undeclared_properties() {
    let wsdl = r###"<definitions xmlns="http://schemas.xmlsoap.org/wsdl/" xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/"
xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:t="urn:t" targetNamespace="urn:t">
  <types><xsd:schema targetNamespace="urn:t"><xsd:element name="put"><xsd:complexType><xsd:sequence>
<xsd:element name="name" type="xsd:string"/><xsd:any namespace="##any" processContents="lax" minOccurs="0" maxOccurs="unbounded"/>
  </xsd:sequence><xsd:attribute name="v" type="xsd:int"/></xsd:complexType></xsd:element></xsd:schema></types>
  <message name="In"><part name="p" element="t:put"/></message>
  <portType name="PT"><operation name="put"><input message="t:In"/></operation></portType>
  <binding name="B" type="t:PT"><soap:binding style="document" transport="http://schemas.xmlsoap.org/soap/http"/>
<operation name="put"><input><soap:body use="literal"/></input></operation></binding>
  <service name="S"><port name="P" binding="t:B"><soap:address location="http://localhost:1/s"/></port></service>
</definitions>"###;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("any.wsdl");
    std::fs::write(&path, wsdl).unwrap();
    let w = Arc::new(Wsdl::load(&Location::File(path)).unwrap());
    let p = Wsdl2OpenApi::from_wsdl(&Wsdl2OpenApiSettings::default(), w, "").unwrap();
    let x = p
        .request_xml(
            &p.ops[0],
            &json!({"name": "n", "v": 3, "extra": {"a": [1, 2]}}),
        )
        .unwrap();
    assert!(x.contains(" v=\"3\">"), "{x}");
    assert!(
        x.contains("<name>n</name><extra><a>1</a><a>2</a></extra>"),
        "{x}"
    );
}

/// The request element of benchmark scenario 6 takes the validator's fast path.
#[test]
fn the_benchmark_request_element_takes_the_fast_path() {
    let bench = |name: &str| format!("{}/../../bench/configs/{name}", env!("CARGO_MANIFEST_DIR"));
    let w = Wsdl::load(&Location::File(bench("person-service.wsdl").into())).unwrap();
    let p = Wsdl2OpenApi::from_wsdl(&Wsdl2OpenApiSettings::default(), Arc::new(w), "").unwrap();
    let lua = std::fs::read_to_string(bench("rest2soap.lua")).unwrap();
    let body = lua
        .lines()
        .find_map(|l| l.strip_prefix("wrk.body = '"))
        .and_then(|l| l.strip_suffix('\''))
        .unwrap();
    let (i, _) = p.find(&Method::POST, "/create-person").unwrap();
    let (element, verdict) = p
        .request_element_checked(&p.ops[i], &serde_json::from_str(body).unwrap())
        .unwrap();
    // Checked while written: no scan needed.
    assert_eq!(verdict, crate::quick::Fast::Valid, "{element}");
    let schemas = &p.wsdl.schema_set;
    assert_eq!(
        schemas.fast().check_element(element.as_bytes()),
        crate::quick::Fast::Valid,
        "{element}"
    );
    assert!(matches!(
        schemas.validate_message(element.as_bytes(), &mut turnpike_xmlstream::NoWatch),
        Ok(crate::schema::Checked::Valid)
    ));
}

/// A JSON request for `p` (of `model`), valid-looking or not, driven by `seed`.
fn request_content(
    model: &Model,
    p: &Particle,
    seed: &mut dyn FnMut(u32) -> u32,
    depth: u32,
) -> Value {
    const SCALARS: [&str; 24] = [
        "Bonn",
        "53111",
        "PERSON",
        "COMPANY",
        "1990-04-01",
        "1990-4-1",
        "true",
        "0",
        "12a",
        "",
        " x ",
        "a\r\nb",
        "a\rb",
        "x&y<z>\"",
        "\u{1}",
        "\u{FFFE}",
        "FEMALE",
        "DE",
        "-1",
        "2147483648",
        "1.5",
        "1e3",
        "Ünïcödé",
        "t\tab",
    ];
    let scalar = |seed: &mut dyn FnMut(u32) -> u32| -> Value {
        match seed(8) {
            0 => Value::from(i64::from(seed(100)) - 10),
            1 => Value::from(2_147_483_648_i64),
            2 => Value::Bool(seed(2) == 0),
            3 => serde_json::Number::from_f64(1.25).map_or(Value::Null, Value::Number),
            4 if p.nillable || seed(4) == 0 => Value::Null,
            _ => Value::String(SCALARS[seed(SCALARS.len() as u32) as usize].to_owned()),
        }
    };
    let one = |seed: &mut dyn FnMut(u32) -> u32| -> Value {
        match &p.typ {
            Type::Complex(i) if depth < 4 && seed(10) != 0 => {
                let Some(c) = model.types.get(*i) else {
                    return Value::Null;
                };
                let mut obj = Map::new();
                for q in &c.particles {
                    if seed(6) != 0 {
                        obj.insert(q.name.clone(), request_content(model, q, seed, depth + 1));
                    }
                }
                for a in &c.attributes {
                    if seed(3) != 0 {
                        obj.insert(a.name.clone(), scalar(seed));
                    }
                }
                if c.text.is_some() && seed(3) != 0 {
                    obj.insert("$value".into(), scalar(seed));
                }
                if seed(12) == 0 {
                    obj.insert("unknown".into(), Value::from(1));
                }
                Value::Object(obj)
            }
            _ => scalar(seed),
        }
    };
    if p.repeated() || seed(15) == 0 {
        let n = seed(4);
        Value::Array((0..n).map(|_| one(seed)).collect())
    } else {
        one(seed)
    }
}

proptest::proptest! {
    /// What the validator's fast path accepts while the request element is written, libxml2
    /// accepts when it reads the written element, and so does the fast path's scan.
    #[test]
    fn checking_while_writing_agrees_with_libxml2(
        name in proptest::sample::select(vec!["cities.wsdl", "partner.wsdl", "qualified-elements.wsdl", "person"]),
        seeds in proptest::collection::vec(proptest::prelude::any::<u32>(), 64),
    ) {
        let p = if name == "person" {
            let bench = format!("{}/../../bench/configs/person-service.wsdl", env!("CARGO_MANIFEST_DIR"));
            let w = Wsdl::load(&Location::File(bench.into())).unwrap();
            Wsdl2OpenApi::from_wsdl(&Wsdl2OpenApiSettings::default(), Arc::new(w), "").unwrap()
        } else {
            compile(name, "")
        };
        let mut k = 0usize;
        let mut seed = |n: u32| {
            k += 1;
            seeds[k % seeds.len()].rotate_left((k / seeds.len()) as u32 * 7) % n.max(1)
        };
        for op in &p.ops {
            let mut content = request_content(&p.model, &op.input, &mut seed, 0);
            if !content.is_object() {
                content = Value::Object(Map::new());
            }
            let Ok((xml, verdict)) = p.request_element_checked(op, &content) else { continue };
            if verdict == crate::quick::Fast::Valid {
                let checked = p.wsdl.schema_set.validate_message(xml.as_bytes(), &mut turnpike_xmlstream::NoWatch);
                proptest::prop_assert!(matches!(checked, Ok(crate::schema::Checked::Valid)), "{xml}: {checked:?}");
                proptest::prop_assert_eq!(p.wsdl.schema_set.fast().check_element(xml.as_bytes()), crate::quick::Fast::Valid, "{}", xml);
            }
        }
    }

    /// Whenever the one-pass conversion answers, it answers what the tree conversion does.
    #[test]
    fn streamed_responses_convert_as_trees(
        name in proptest::sample::select(vec!["cities.wsdl", "partner.wsdl"]),
        parts in proptest::collection::vec(proptest::sample::select(vec![
            "<id>7</id>", "<id> 8 </id>", "<id>x</id>", "<name>A &amp; B</name>", "<name><![CDATA[<c>]]></name>",
            "<kind>COMPANY</kind>", "<active>1</active>", "<active>no</active>", "<creditLimit>1.5e3</creditLimit>",
            "<partners><id>1</id></partners>", "<partners/>", "<partner xsi:nil='true' xmlns:xsi='http://www.w3.org/2001/XMLSchema-instance'/>",
            "<partner><id>2</id><address><city>Bonn</city></address></partner>", "<country>DE</country>", "<population>12</population>",
            "<population>-1.0</population>", "<other a='1'>t<x>y</x></other>", "<other>1</other>", "text", "<!-- c -->",
            "<u:x xmlns:u='urn:u' u:a='1' b='&lt;'/>", "<bad:x/>", "&#65;", "&nope;", "<a></b>",
        ]), 0..6),
        wrap in 0usize..4,
    ) {
        let p = compile(name, "");
        for op in &p.ops {
            let (ns, el) = op.output.as_ref().map(|o| (o.ns.clone(), o.name.clone())).unwrap_or_default();
            let body = format!("<r:{el} xmlns:r='{ns}'>{}</r:{el}>", parts.concat());
            let doc = match wrap {
                0 => format!("<s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'><s:Body>{body}</s:Body></s:Envelope>"),
                1 => format!("<?xml version='1.0'?><e:Envelope xmlns:e='http://www.w3.org/2003/05/soap-envelope'><e:Header><h>{}</h></e:Header><e:Body>{body}<x/></e:Body></e:Envelope>", parts.concat()),
                2 => format!("<s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'><s:Body>{}</s:Body></s:Envelope>", parts.concat()),
                _ => format!("<s:Envelope xmlns:s='http://schemas.xmlsoap.org/soap/envelope/'><s:Body/></s:Envelope>{}", parts.concat()),
            };
            let output = op.output.as_ref().map(|o| &o.typ);
            if let Some(v) = super::stream::response_json(&p.model, output, doc.as_bytes()) {
                let tree = p.response_json_tree(op, doc.as_bytes());
                proptest::prop_assert!(tree.is_ok(), "{doc}: streamed {v}, tree failed");
                proptest::prop_assert_eq!(&v, &tree.unwrap_or_default(), "{}", doc);
            }
        }
    }

    #[test]
    fn response_conversion_never_panics(input in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
        let p = compile("cities.wsdl", "");
        let _ = p.response_json(&p.ops[0], &input);
    }

    #[test]
    fn request_conversion_never_panics(s in "\\PC{0,40}", n in proptest::prelude::any::<i64>()) {
        let p = compile("partner.wsdl", "");
        for op in &p.ops {
            let _ = p.request_xml(op, &json!({"name": s.clone(), "id": n, "address": {"city": s.clone()}, "kind": [s.clone()]}));
        }
    }
}
