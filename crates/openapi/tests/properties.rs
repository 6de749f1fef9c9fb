//! Property tests of the parsers: parameter reading never panics and keeps what it was given,
//! and the YAML form of a spec reads back as the same JSON.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::Value;
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

proptest! {
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
