//! Templates (`${path.id}`, `${header.X}`, `${$.jsonpath}`): any text parses or is refused, and
//! a parsed one can be marked for JSON output (string literals found in its text).
#![no_main]
use libfuzzer_sys::fuzz_target;
use turnpike_core::{Template, TemplateScope};

fuzz_target!(|src: &str| {
    let scope = TemplateScope {
        path_params: vec!["id".into(), "name".into()],
        ..Default::default()
    };
    if let Ok(t) = Template::parse(src, &scope) {
        let _ = t.json();
    }
});
