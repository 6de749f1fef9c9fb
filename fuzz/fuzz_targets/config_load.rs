//! YAML text → documents → compiled snapshot: every error is reported, nothing panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let Ok(set) = turnpike_config::load::load_str("fuzz.yaml", text, &|_| Some("1".into())) else {
        return;
    };
    // Documents that name URLs would be fetched at load: not on a fuzzer's time.
    if text.contains("://") {
        return;
    }
    let _ = turnpike_compile::compile(&set);
});
