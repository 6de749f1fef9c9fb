//! Property tests of the parsers: parameter reading never panics and keeps what it was given,
//! the YAML form of a spec reads back as the same JSON, and multipart bodies split back into the
//! parts they were made of (and never panic the parser).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::Value;
use turnpike_openapi::multipart;
use turnpike_openapi::params::{parse_query, Location, Param, Prim, Shape, Style};

fn param(location: Location, style: Style, explode: bool, shape: Shape) -> Param {
    Param {
        name: "p".into(),
        location,
        required: false,
        style,
        explode,
        shape,
        schema: None,
        path_index: 0,
        label: "p".into(),
    }
}

fn any_style() -> impl Strategy<Value = Style> {
    prop_oneof![
        Just(Style::Simple),
        Just(Style::Label),
        Just(Style::Matrix),
        Just(Style::Form),
        Just(Style::SpaceDelimited),
        Just(Style::PipeDelimited),
        Just(Style::DeepObject),
    ]
}

fn any_shape() -> impl Strategy<Value = Shape> {
    let prim = prop_oneof![
        Just(Prim::String),
        Just(Prim::Integer),
        Just(Prim::Number),
        Just(Prim::Boolean)
    ];
    prop_oneof![
        prim.clone().prop_map(Shape::Prim),
        prim.clone().prop_map(Shape::Array),
        prim.prop_map(|p| Shape::Object(vec![("a".into(), p)])),
        Just(Shape::Json),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 40, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map("[a-z $:#-]{1,6}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// One part to encode: name, file name, content type, content.
type PartSpec = (String, Option<String>, Option<String>, Vec<u8>);

fn part_spec() -> impl Strategy<Value = PartSpec> {
    // Content made of the bytes that matter to the syntax (CR, LF, dashes, boundary letters) and
    // any others.
    let byte = prop_oneof![
        Just(b'\r'),
        Just(b'\n'),
        Just(b'-'),
        Just(b'a'),
        any::<u8>()
    ];
    (
        "[a-zA-Z0-9_ .;=\"\\\\é-]{1,12}",
        prop::option::of("[a-zA-Z0-9_ .\"é-]{0,12}"),
        prop::option::of(prop_oneof![
            Just("text/plain".to_owned()),
            Just("application/json; charset=utf-8".to_owned()),
            Just("image/png".to_owned()),
        ]),
        prop::collection::vec(byte, 0..80),
    )
}

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn encode(parts: &[PartSpec], boundary: &str, preamble: &[u8]) -> Vec<u8> {
    let mut out = preamble.to_vec();
    if !preamble.is_empty() {
        out.extend_from_slice(b"\r\n");
    }
    for (name, filename, ct, body) in parts {
        out.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        let mut cd = format!("Content-Disposition: form-data; name={}", quote(name));
        if let Some(f) = filename {
            cd.push_str(&format!("; filename={}", quote(f)));
        }
        out.extend_from_slice(cd.as_bytes());
        out.extend_from_slice(b"\r\n");
        if let Some(ct) = ct {
            out.extend_from_slice(format!("Content-Type: {ct}\r\n").as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(body);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

proptest! {
    #[test]
    fn multipart_bodies_split_into_their_parts(
        parts in prop::collection::vec(part_spec(), 0..6),
        boundary in "[a-zA-Z0-9'()+_,./:=?-]{1,69}[a-zA-Z0-9]",
        preamble in prop::collection::vec(any::<u8>(), 0..20),
    ) {
        let delimiter = format!("\r\n--{boundary}");
        // The boundary must not occur in the content (RFC 2046); the sender picks it so.
        prop_assume!(parts.iter().all(|p| !contains(&[b"\r\n", &p.3[..]].concat(), delimiter.as_bytes())));
        prop_assume!(!contains(&[b"\r\n", &preamble[..]].concat(), format!("\r\n--{boundary}").as_bytes()));
        prop_assume!(!preamble.starts_with(b"--"));
        let ct = format!("multipart/form-data; boundary=\"{boundary}\"");
        prop_assert_eq!(multipart::boundary(&ct).unwrap(), boundary.clone());
        let body = encode(&parts, &boundary, &preamble);
        let got = multipart::parse(&body, &boundary).unwrap();
        prop_assert_eq!(got.len(), parts.len());
        for (g, (name, filename, ct, content)) in got.iter().zip(&parts) {
            prop_assert_eq!(&g.name, name);
            prop_assert_eq!(&g.filename, filename);
            prop_assert_eq!(&g.content_type, ct);
            prop_assert_eq!(g.body, &content[..]);
        }
    }

    #[test]
    fn multipart_parser_never_panics(
        parts in prop::collection::vec(part_spec(), 0..4),
        cut in any::<prop::sample::Index>(),
        flip in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        garbage in prop::collection::vec(any::<u8>(), 0..200),
        header in ".{0,60}",
    ) {
        let body = encode(&parts, "b0undary", b"");
        let _ = multipart::parse(&body[..cut.index(body.len() + 1)], "b0undary");
        let mut changed = body.clone();
        if !changed.is_empty() {
            let i = flip.index(changed.len());
            changed[i] = byte;
        }
        let _ = multipart::parse(&changed, "b0undary");
        let _ = multipart::parse(&garbage, "b");
        let _ = multipart::boundary(&header);
        let _ = multipart::parameters(&header);
    }

    #[test]
    fn reading_parameters_never_panics(
        raw in ".{0,40}",
        style in any_style(),
        explode in any::<bool>(),
        shape in any_shape(),
    ) {
        for loc in [Location::Path, Location::Header, Location::Cookie, Location::Query] {
            let p = param(loc, style, explode, shape.clone());
            let _ = p.read_single(&raw);
            let q = parse_query(&raw);
            let _ = p.read_query(&q);
        }
    }

    #[test]
    fn integers_and_strings_keep_their_value(n in any::<i64>(), s in "[a-zA-Z0-9 ]{0,20}") {
        prop_assert_eq!(Prim::Integer.coerce(&n.to_string()), Value::from(n));
        prop_assert_eq!(Prim::String.coerce(&s), Value::from(s.clone()));
        let p = param(Location::Query, Style::Form, true, Shape::Prim(Prim::String));
        let encoded: String = s.replace(' ', "+");
        let query = format!("x=1&p={encoded}&p=2");
        let q = parse_query(&query);
        prop_assert_eq!(p.read_query(&q).unwrap().unwrap(), Value::from(s));
    }

    #[test]
    fn yaml_form_reads_back_as_the_same_json(v in json_value()) {
        let mut out = String::new();
        yaml_rust2::YamlEmitter::new(&mut out)
            .dump(&turnpike_openapi::docs::to_yaml(&v))
            .unwrap();
        let back = turnpike_config::yaml::parse_documents(&out, &|_| None).unwrap();
        let json = turnpike_config::yaml::to_json(&back[0], &mut String::new(), &mut Default::default());
        prop_assert_eq!(json, v, "{}", out);
    }
}
