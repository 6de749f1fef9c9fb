//! Compiles the C shim that formats libxslt's variadic error reports (stable Rust cannot
//! define a C-variadic function). libxslt itself is linked by the `libxslt` crate.

fn main() {
    println!("cargo:rerun-if-changed=src/shim.c");
    cc::Build::new()
        .file("src/shim.c")
        .warnings(true)
        .compile("turnpike_xslt_shim");
}
