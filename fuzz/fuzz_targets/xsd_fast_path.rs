//! The XML Schema fast path against libxml2: whenever the fast path says "valid", libxml2
//! accepts the message too.
#![no_main]
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use turnpike_soap::{Location, Wsdl, WsdlValidator};

fn validator() -> &'static WsdlValidator {
    static V: OnceLock<WsdlValidator> = OnceLock::new();
    V.get_or_init(|| {
        let path = std::env::var("TURNPIKE_FUZZ_WSDL").unwrap_or_else(|_| {
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/wsdl/cities.wsdl").into()
        });
        let wsdl = Wsdl::load(&Location::File(path.into())).expect("the fuzzing WSDL");
        WsdlValidator::new(Arc::new(wsdl), None).expect("its validator")
    })
}

fuzz_target!(|message: &[u8]| {
    let (fast_valid, libxml2_valid) = validator().fast_path_against_libxml2(message);
    if fast_valid {
        assert!(libxml2_valid, "the fast path accepted a message libxml2 refuses");
    }
});
