//! Path templates and the router: any set of templates builds or is refused with a message,
//! and any lookup answers.
#![no_main]
use libfuzzer_sys::fuzz_target;
use turnpike_core::router::{PathSpec, RouteSpec, Router};

fuzz_target!(|input: (Vec<(String, bool)>, Vec<String>)| {
    let (specs, paths) = input;
    let mut routes = Vec::new();
    for (i, (uri, regex)) in specs.iter().take(16).enumerate() {
        let path = PathSpec::from_uri(uri, *regex);
        if path.param_names().is_err() {
            continue;
        }
        routes.push((RouteSpec { hosts: Vec::new(), method: None, path }, i));
    }
    let Ok(router) = Router::build(routes) else {
        return;
    };
    for p in paths.iter().take(16) {
        if let Some(m) = router.lookup(None, &http::Method::GET, p) {
            for &(s, e) in &m.params {
                assert!(s <= e && usize::from(e) <= p.len(), "a parameter outside the path");
            }
        }
    }
});
