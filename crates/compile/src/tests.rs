//! Compile-stage tests on configurations written as YAML text.

use turnpike_config::load::load_str;
use turnpike_config::ConfigErrors;

/// Loads and compiles `yaml`; the errors of both stages.
fn errors(yaml: &str) -> ConfigErrors {
    let set = match load_str("t.yaml", yaml, &|_| None) {
        Ok(set) => set,
        Err(e) => return e,
    };
    match crate::compile(&set) {
        Ok(_) => ConfigErrors::default(),
        Err(mut e) => {
            e.sort();
            e
        }
    }
}

#[test]
fn unknown_policy_is_named_at_its_key() {
    let err = errors("api:\n  port: 2000\n  flow:\n    - retrun: {}\n");
    let e = err
        .0
        .iter()
        .find(|e| e.message.contains("unknown policy"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(e.message.contains("unknown policy `retrun`"), "{e}");
    assert!(e.message.contains("`return`"), "{e}");
    assert_eq!((e.location.line, e.location.column), (4, 7), "{e}");
}

#[test]
fn wrong_type_points_at_the_value() {
    let err = errors("api:\n  port: 2000\n  flow:\n    - return:\n        status: abc\n");
    let e = &err.0[0];
    assert_eq!(e.location.key, "api.flow[0].return.status");
    assert_eq!((e.location.line, e.location.column), (5, 17), "{e}");
}

#[test]
fn every_error_of_a_policy_is_reported_in_file_order() {
    let err = errors(
        "api:\n  port: 2000\n  flow:\n    - return:\n        zeta: 1\n        status: abc\n        alpha: 2\n",
    );
    let at: Vec<(u32, &str)> = err
        .0
        .iter()
        .map(|e| (e.location.line, e.location.key.as_str()))
        .collect();
    assert_eq!(
        at,
        [
            (5, "api.flow[0].return.zeta"),
            (6, "api.flow[0].return.status"),
            (7, "api.flow[0].return.alpha")
        ],
        "{err}"
    );
}

#[test]
fn a_policy_outside_its_phases_is_refused() {
    let err = errors(
        "api:\n  port: 2000\n  flow:\n    - response:\n        - rewriter: { mappings: [] }\n    - return: {}\n",
    );
    assert!(err.0[0].message.contains("acts on requests only"), "{err}");
    assert_eq!(err.0[0].location.line, 5, "{err}");
}

#[test]
fn authentication_cannot_stand_in_a_consumer_flow() {
    let err = errors(
        "consumer:\n  name: a\n  flow:\n    - apiKey: { stores: [ { consumers: {} } ] }\n---\napi:\n  port: 2000\n  flow:\n    - return: {}\n",
    );
    assert!(err.0[0].message.contains("consumer's flow"), "{err}");
}

#[test]
fn two_apis_taking_the_same_requests_are_an_error_naming_both() {
    let err = errors(
        "api:\n  port: 2000\n  path: { uri: /a }\n  flow: [ { return: {} } ]\n---\napi:\n  port: 2000\n  path: { uri: /a }\n  flow: [ { return: {} } ]\n---\napi:\n  port: 2001\n  path: { uri: /a }\n  flow: [ { return: {} } ]\n",
    );
    assert_eq!(err.0.len(), 1, "{err}");
    let e = &err.0[0];
    assert_eq!(e.location.line, 6, "{e}");
    assert!(
        e.message.contains("same requests") && e.message.contains("t.yaml:1:1"),
        "{e}"
    );
    // Other hosts or methods make other routes.
    let ok = errors(
        "api:\n  port: 2000\n  host: a.example\n  flow: [ { return: {} } ]\n---\napi:\n  port: 2000\n  host: b.example\n  flow: [ { return: {} } ]\n---\napi:\n  port: 2000\n  host: b.example\n  method: POST\n  flow: [ { return: {} } ]\n",
    );
    assert!(ok.is_empty(), "{ok}");
}
