//! JSON pointers: escaping a segment, and a pointer as a URI fragment.

/// Characters escaped in a JSON pointer used as a URI fragment.
pub(crate) const FRAGMENT: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'<')
    .add(b'>')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'|')
    .add(b'\\')
    .add(b'^')
    .add(b'%')
    .add(b'[')
    .add(b']')
    .add(b'#');

/// `#` and the JSON pointer `ptr`, percent-encoded where a URI fragment needs it.
pub fn fragment_ref(ptr: &str) -> String {
    format!("#{}", percent_encoding::utf8_percent_encode(ptr, FRAGMENT))
}

/// Escapes a JSON-pointer segment.
pub fn escape(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}
