//! `multipart/form-data` bodies (RFC 7578, in the multipart syntax of RFC 2046): the `boundary`
//! of a Content-Type, and the parts of a buffered body with their names, file names, content
//! types and contents. The parts borrow the body: nothing is copied.

use memchr::memmem;
use serde_json::{Map, Value};

use crate::media::is_json;
use crate::params::Prim;
use crate::violation::Violation;

/// How the parts of one property of a `multipart/form-data` body become its JSON value (compiled
/// from the schema's properties and the media type's `encoding`).
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// The property (and part) name.
    pub name: String,
    /// The property is an array: each part of this name is one item.
    pub array: bool,
    /// The declared type of the value (of the items, for arrays); `None` when not declared or
    /// not a scalar.
    pub prim: Option<Prim>,
    /// Parts are JSON: the (item) type is an object or an array, or the declared
    /// `encoding.contentType` is JSON.
    pub json: bool,
    /// `encoding.<name>.contentType`: the media types or ranges (`image/*`) a part may have, in
    /// lower case; empty when any is allowed.
    pub content_types: Vec<String>,
    /// Its location in violations (`#/body/name`).
    pub label: String,
}

/// True when the media range `range` (`image/png`, `image/*`, `*/*`) covers `essence`.
pub fn range_covers(range: &str, essence: &str) -> bool {
    range == "*/*"
        || range == essence
        || range
            .strip_suffix("/*")
            .is_some_and(|t| essence.split('/').next() == Some(t))
}

/// The parts of a form as a JSON object, each read as its property says (repeated parts of an
/// array property as an array); violations of the parts themselves (a Content-Type the
/// `encoding` does not allow, invalid JSON, a repeated scalar) go to `out`.
pub fn form_value(parts: &[Part<'_>], fields: &[Field], out: &mut Vec<Violation>) -> Value {
    // Per name, in order of first appearance: its field, and each part's value (and whether it
    // was read as JSON).
    type Values<'p> = Vec<(&'p str, Option<&'p Field>, Vec<(Value, bool)>)>;
    let mut values: Values<'_> = Vec::new();
    for p in parts {
        let field = fields.iter().find(|f| f.name == p.name);
        let ct = p
            .content_type
            .as_deref()
            .map(crate::media::essence)
            .unwrap_or_else(|| "text/plain".to_owned());
        if let Some(f) = field {
            if !f.content_types.is_empty() && !f.content_types.iter().any(|r| range_covers(r, &ct))
            {
                out.push(Violation {
                    location: f.label.clone(),
                    message: format!(
                        "the part's Content-Type `{ct}` is not allowed here (allowed: {})",
                        f.content_types.join(", ")
                    ),
                });
            }
        }
        let text = || String::from_utf8_lossy(p.body).into_owned();
        let prim = field.and_then(|f| f.prim);
        let as_json = prim != Some(Prim::String) && (is_json(&ct) || field.is_some_and(|f| f.json));
        let value = if as_json {
            match serde_json::from_slice::<Value>(p.body) {
                Ok(v) => (v, true),
                Err(e) => {
                    out.push(Violation {
                        location: format!("#/body/{}", crate::pointer::escape(&p.name)),
                        message: format!("the part is not valid JSON: {e}"),
                    });
                    (Value::String(text()), false)
                }
            }
        } else {
            match prim {
                Some(t) => (t.coerce(&text()), false),
                None => (Value::String(text()), false),
            }
        };
        match values.iter_mut().find(|(n, _, _)| *n == p.name) {
            Some((_, _, vs)) => vs.push(value),
            None => values.push((&p.name, field, vec![value])),
        }
    }
    let mut obj = Map::new();
    for (name, field, mut vs) in values {
        let value = match field {
            Some(f) if f.array => {
                // One JSON part holding the whole array is taken as the array.
                if vs.len() == 1 && vs[0].1 && vs[0].0.is_array() {
                    vs.remove(0).0
                } else {
                    Value::Array(vs.into_iter().map(|(v, _)| v).collect())
                }
            }
            Some(f) => {
                if vs.len() > 1 {
                    out.push(Violation {
                        location: f.label.clone(),
                        message: format!(
                            "{} parts are named `{name}`, but it is not an array",
                            vs.len()
                        ),
                    });
                }
                vs.swap_remove(0).0
            }
            // Undeclared parts: the first one counts (as for other forms).
            None => vs.swap_remove(0).0,
        };
        obj.insert(name.to_owned(), value);
    }
    Value::Object(obj)
}

/// One part of a `multipart/form-data` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part<'a> {
    /// The `name` of its `Content-Disposition`.
    pub name: String,
    /// The `filename` of its `Content-Disposition`, when given.
    pub filename: Option<String>,
    /// Its `Content-Type` header as sent (RFC 7578: `text/plain` when absent).
    pub content_type: Option<String>,
    /// Its content.
    pub body: &'a [u8],
}

/// Why a multipart body (or its Content-Type) cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultipartError {
    /// The Content-Type has no `boundary` parameter.
    NoBoundary,
    /// The `boundary` parameter is not 1 to 70 of the characters RFC 2046 allows.
    BadBoundary(String),
    /// The body holds no boundary line.
    NoDelimiter,
    /// The body ends before the closing boundary line (`--boundary--`).
    Unterminated,
    /// A boundary line is followed by something other than a line end.
    BadDelimiter,
    /// The header block of a part is malformed.
    BadHeaders(String),
    /// A part has no `Content-Disposition: form-data` with a `name`.
    NoName,
}

impl std::fmt::Display for MultipartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MultipartError::NoBoundary => {
                f.write_str("a multipart Content-Type needs a `boundary` parameter")
            }
            MultipartError::BadBoundary(b) => write!(
                f,
                "the boundary `{b}` is not 1 to 70 characters of letters, digits and '()+_,-./:=? (RFC 2046)"
            ),
            MultipartError::NoDelimiter => f.write_str("the body holds no boundary line"),
            MultipartError::Unterminated => {
                f.write_str("the body ends before the closing boundary line")
            }
            MultipartError::BadDelimiter => {
                f.write_str("a boundary line is followed by something other than a line end")
            }
            MultipartError::BadHeaders(m) => write!(f, "malformed part headers: {m}"),
            MultipartError::NoName => f.write_str(
                "a part has no `Content-Disposition: form-data` header with a `name`",
            ),
        }
    }
}

impl std::error::Error for MultipartError {}

/// The parameters of a header value such as `form-data; name="a"; filename="b.txt"` (names in
/// lower case; quoted strings unquoted), after its first `;`.
pub fn parameters(value: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Some((_, mut rest)) = value.split_once(';') else {
        return out;
    };
    loop {
        rest = rest.trim_start_matches([' ', '\t', ';']);
        if rest.is_empty() {
            return out;
        }
        let name_end = rest.find(['=', ';']).unwrap_or(rest.len());
        let name = rest[..name_end].trim().to_ascii_lowercase();
        rest = &rest[name_end..];
        let Some(after) = rest.strip_prefix('=') else {
            // A parameter without a value.
            out.push((name, String::new()));
            continue;
        };
        let after = after.trim_start_matches([' ', '\t']);
        let value;
        if let Some(q) = after.strip_prefix('"') {
            let mut v = String::new();
            let mut chars = q.char_indices();
            let mut end = q.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            v.push(n);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => v.push(c),
                }
            }
            value = v;
            rest = &q[end.min(q.len())..];
            // Anything between the closing quote and the next `;` is ignored.
            rest = rest.find(';').map_or("", |i| &rest[i..]);
        } else {
            let end = after.find(';').unwrap_or(after.len());
            value = after[..end].trim().to_owned();
            rest = &after[end..];
        }
        out.push((name, value));
    }
}

/// The `boundary` parameter of a `multipart/*` Content-Type, checked against RFC 2046.
pub fn boundary(content_type: &str) -> Result<String, MultipartError> {
    let b = parameters(content_type)
        .into_iter()
        .find(|(n, _)| n == "boundary")
        .map(|(_, v)| v)
        .ok_or(MultipartError::NoBoundary)?;
    let ok = (1..=70).contains(&b.len())
        && !b.ends_with(' ')
        && b.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"'()+_,-./:=? ".contains(&c));
    if ok {
        Ok(b)
    } else {
        Err(MultipartError::BadBoundary(b.chars().take(80).collect()))
    }
}

/// Splits a `multipart/form-data` body into its parts. The preamble and the epilogue are
/// ignored; line ends must be CRLF.
pub fn parse<'a>(body: &'a [u8], boundary: &str) -> Result<Vec<Part<'a>>, MultipartError> {
    let dash = format!("--{boundary}");
    let delimiter = format!("\r\n--{boundary}");
    let finder = memmem::Finder::new(delimiter.as_bytes());
    let mut pos = if body.starts_with(dash.as_bytes()) {
        0
    } else {
        finder.find(body).ok_or(MultipartError::NoDelimiter)? + 2
    };
    let mut parts = Vec::new();
    loop {
        let mut i = pos + dash.len();
        let rest = body.get(i..).unwrap_or_default();
        if rest.starts_with(b"--") {
            return Ok(parts);
        }
        if rest.is_empty() {
            return Err(MultipartError::Unterminated);
        }
        while matches!(body.get(i), Some(b' ' | b'\t')) {
            i += 1;
        }
        let rest = body.get(i..).unwrap_or_default();
        if !rest.starts_with(b"\r\n") {
            return Err(if rest.is_empty() {
                MultipartError::Unterminated
            } else {
                MultipartError::BadDelimiter
            });
        }
        i += 2;
        let rest = body.get(i..).unwrap_or_default();
        let (headers, start) = if rest.starts_with(b"\r\n") {
            (&rest[..0], i + 2)
        } else {
            let end = memmem::find(rest, b"\r\n\r\n").ok_or(MultipartError::Unterminated)?;
            (&rest[..end], i + end + 4)
        };
        let content = body.get(start..).unwrap_or_default();
        let end = finder.find(content).ok_or(MultipartError::Unterminated)?;
        parts.push(part(headers, &content[..end])?);
        pos = start + end + 2;
    }
}

/// Reads the header block of a part.
fn part<'a>(headers: &[u8], body: &'a [u8]) -> Result<Part<'a>, MultipartError> {
    let text = String::from_utf8_lossy(headers);
    let mut fields: Vec<(String, String)> = Vec::new();
    for line in text.split("\r\n") {
        if line.starts_with([' ', '\t']) {
            // An obsolete folded line continues the previous header.
            match fields.last_mut() {
                Some((_, v)) => {
                    v.push(' ');
                    v.push_str(line.trim());
                }
                None => {
                    return Err(MultipartError::BadHeaders(
                        "a folded line before any header".into(),
                    ))
                }
            }
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(MultipartError::BadHeaders(format!(
                "`{}` is not a header line",
                line.chars().take(60).collect::<String>()
            )));
        };
        if name.is_empty() || name.contains([' ', '\t']) {
            return Err(MultipartError::BadHeaders(format!(
                "`{}` is not a header name",
                name.chars().take(60).collect::<String>()
            )));
        }
        fields.push((name.to_ascii_lowercase(), value.trim().to_owned()));
    }
    let header = |n: &str| fields.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    let disposition = header("content-disposition").ok_or(MultipartError::NoName)?;
    let kind = disposition.split(';').next().unwrap_or("").trim();
    if !kind.eq_ignore_ascii_case("form-data") {
        return Err(MultipartError::NoName);
    }
    let params = parameters(disposition);
    let param = |n: &str| params.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    Ok(Part {
        name: param("name").ok_or(MultipartError::NoName)?,
        filename: param("filename"),
        content_type: header("content-type").map(str::to_owned),
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundaries() {
        assert_eq!(
            boundary("multipart/form-data; boundary=abc123").unwrap(),
            "abc123"
        );
        assert_eq!(
            boundary("multipart/form-data; charset=utf-8; BOUNDARY=\"a b:c\"").unwrap(),
            "a b:c"
        );
        assert_eq!(
            boundary("multipart/form-data"),
            Err(MultipartError::NoBoundary)
        );
        assert!(matches!(
            boundary("multipart/form-data; boundary=\"\""),
            Err(MultipartError::BadBoundary(_))
        ));
        assert!(matches!(
            boundary(&format!("multipart/form-data; boundary={}", "x".repeat(71))),
            Err(MultipartError::BadBoundary(_))
        ));
        assert!(matches!(
            boundary("multipart/form-data; boundary=a<b"),
            Err(MultipartError::BadBoundary(_))
        ));
    }

    #[test]
    fn parameters_with_quotes_and_escapes() {
        assert_eq!(
            parameters(r#"form-data; name="a \"q\"; b"; filename=x.txt ;flag"#),
            [
                ("name".to_owned(), "a \"q\"; b".to_owned()),
                ("filename".to_owned(), "x.txt".to_owned()),
                ("flag".to_owned(), String::new()),
            ]
        );
    }

    #[test]
    fn parses_parts() {
        let body = b"preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--XyZ  \r\ncontent-disposition: FORM-DATA; name=file; filename=\"f.png\"\r\nContent-Type: image/png\r\n\r\n\x89PNG\r\n--X\r\n--XyZ--\r\nepilogue";
        let parts = parse(body, "XyZ").unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].name, "a");
        assert_eq!(parts[0].body, b"1");
        assert_eq!(parts[0].content_type, None);
        assert_eq!(parts[1].name, "file");
        assert_eq!(parts[1].filename.as_deref(), Some("f.png"));
        assert_eq!(parts[1].content_type.as_deref(), Some("image/png"));
        assert_eq!(parts[1].body, b"\x89PNG\r\n--X");
        assert_eq!(parse(b"--b--", "b").unwrap(), []);
    }

    #[test]
    fn rejects_malformed_bodies() {
        let ok = "--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--b--";
        assert!(parse(ok.as_bytes(), "b").is_ok());
        assert_eq!(parse(ok.as_bytes(), "c"), Err(MultipartError::NoDelimiter));
        assert_eq!(
            parse(&ok.as_bytes()[..ok.len() - 2], "b"),
            Err(MultipartError::Unterminated)
        );
        assert_eq!(
            parse(
                b"--b\r\nContent-Disposition: form-data; name=a\r\n\r\n1",
                "b"
            ),
            Err(MultipartError::Unterminated)
        );
        assert_eq!(
            parse(b"--bx\r\n\r\n--b--", "b"),
            Err(MultipartError::BadDelimiter)
        );
        assert_eq!(
            parse(b"--b\r\nContent-Type: text/plain\r\n\r\n1\r\n--b--", "b"),
            Err(MultipartError::NoName)
        );
        assert_eq!(
            parse(
                b"--b\r\nContent-Disposition: attachment; name=a\r\n\r\n1\r\n--b--",
                "b"
            ),
            Err(MultipartError::NoName)
        );
        assert!(matches!(
            parse(b"--b\r\nno colon here\r\n\r\n1\r\n--b--", "b"),
            Err(MultipartError::BadHeaders(_))
        ));
        assert_eq!(parse(b"--b", "b"), Err(MultipartError::Unterminated));
    }
}
