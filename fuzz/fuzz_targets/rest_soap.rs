//! wsdl2openapi both ways: any JSON becomes a request element or a list of violations; any
//! response becomes JSON or a problem, and the one-pass conversion agrees with the tree.
#![no_main]
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use turnpike_soap::{Location, Wsdl, Wsdl2OpenApi};

fn policy() -> &'static Wsdl2OpenApi {
    static P: OnceLock<Wsdl2OpenApi> = OnceLock::new();
    P.get_or_init(|| {
        let path = std::env::var("TURNPIKE_FUZZ_WSDL").unwrap_or_else(|_| {
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/wsdl/cities.wsdl").into()
        });
        let wsdl = Wsdl::load(&Location::File(path.into())).expect("the fuzzing WSDL");
        Wsdl2OpenApi::from_wsdl(&Default::default(), Arc::new(wsdl), "").expect("the policy")
    })
}

fuzz_target!(|input: (&[u8], &[u8])| {
    let (json, xml) = input;
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(json) {
        policy().fuzz_request(&value);
    }
    policy().fuzz_response(xml);
});
