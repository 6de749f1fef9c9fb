//! Templates (`${path.id}`, `${header.X}`, `${$.jsonpath}`): any text parses or is refused.
#![no_main]
use libfuzzer_sys::fuzz_target;
use turnpike_core::{Template, TemplateScope};

fuzz_target!(|src: &str| {
    let scope = TemplateScope {
        path_params: vec!["id".into(), "name".into()],
        ..Default::default()
    };
    let _ = Template::parse(src, &scope);
});
