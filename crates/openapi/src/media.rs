//! Media types: the essence of a `Content-Type`, and which ones are JSON.

/// The `type/subtype` of a media type, in lower case, without parameters.
pub fn essence(ct: &str) -> String {
    essence_cow(ct).into_owned()
}

/// [`essence`] without allocating when the media type is already in lower case (the usual case,
/// on the request path).
pub fn essence_cow(ct: &str) -> std::borrow::Cow<'_, str> {
    let e = ct.split(';').next().unwrap_or("").trim();
    if e.bytes().any(|b| b.is_ascii_uppercase()) {
        std::borrow::Cow::Owned(e.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(e)
    }
}

/// True for `application/json` and `*/*+json`.
pub fn is_json(essence: &str) -> bool {
    essence == "application/json" || essence.ends_with("+json")
}
