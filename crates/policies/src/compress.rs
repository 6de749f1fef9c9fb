//! `compress`: response compression. The request phase picks the encoding from the client's
//! `Accept-Encoding` (q-values, `*`, `identity;q=0`) in the policy's order of preference; the
//! response phase encodes the body as it streams (each chunk in, what the encoder has ready
//! out: no buffering of the whole body) when the response qualifies: a compressible content type,
//! not already encoded, no `Cache-Control: no-transform`, not a range or a bodiless status, and
//! at least `minSize` when its length is announced. An encoded response loses `Content-Length`,
//! gets `Content-Encoding`, and a strong `ETag` becomes weak; every response that qualifies says
//! `Vary: Accept-Encoding`, whichever encoding the client got. The encoders are `flate2`
//! (gzip), `brotli` and `zstd`.

mod encode;
#[cfg(test)]
mod tests;

use http::header::{self, HeaderValue};
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::{Body, CompileContext, CompileError, Exchange, Outcome, Policy, PolicyFactory};

use crate::err;

pub use encode::Encoding;

/// `compress`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CompressSettings {
    /// The encodings offered, most preferred first (default `[zstd, br, gzip]`): among those
    /// the client accepts with the highest q-value, the first of this list wins.
    #[serde(default)]
    pub encodings: Option<Vec<String>>,
    /// Responses announcing a smaller `Content-Length` are left alone (default 1KB); responses
    /// of unknown length are encoded.
    #[serde(default)]
    pub min_size: Option<turnpike_config::units::ByteSize>,
    /// The media types encoded (default: `text/*`, JSON, XML, JavaScript, SVG, and `+json`/
    /// `+xml` types); a trailing `/*` matches a whole type.
    #[serde(default)]
    pub content_types: Option<Vec<String>>,
    /// Levels per encoding (defaults: gzip 6, br 4, zstd 3).
    #[serde(default)]
    pub levels: Option<LevelSettings>,
}

/// Compression levels.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LevelSettings {
    /// 1 to 9.
    #[serde(default)]
    pub gzip: Option<u32>,
    /// 0 to 11.
    #[serde(default)]
    pub br: Option<u32>,
    /// 1 to 19.
    #[serde(default)]
    pub zstd: Option<i32>,
}

/// The default media types.
const DEFAULT_TYPES: &[&str] = &[
    "text/*",
    "application/json",
    "application/javascript",
    "application/x-javascript",
    "application/ecmascript",
    "application/xml",
    "application/xhtml+xml",
    "application/rss+xml",
    "application/atom+xml",
    "application/problem+json",
    "application/problem+xml",
    "application/graphql-response+json",
    "application/wasm",
    "image/svg+xml",
];

/// The compiled `compress` policy.
#[derive(Debug)]
pub struct Compress {
    /// Offered encodings with their levels, most preferred first.
    offered: Vec<(Encoding, i32)>,
    min_size: u64,
    types: Vec<String>,
}

/// The encoding the request phase chose for this exchange's response (between this policy's
/// two phases).
#[derive(Debug, Clone, Copy)]
struct Chosen(Option<(Encoding, i32)>);

impl PolicyFactory for Compress {
    const NAME: &'static str = "compress";
    type Settings = CompressSettings;

    /// Checks the encodings, levels and media types.
    fn compile(s: CompressSettings, _: &CompileContext<'_>) -> Result<Self, CompileError> {
        let names = s
            .encodings
            .unwrap_or_else(|| vec!["zstd".into(), "br".into(), "gzip".into()]);
        if names.is_empty() {
            return Err(err("encodings", "name at least one of gzip, br, zstd"));
        }
        let levels = s.levels.unwrap_or_default();
        let mut offered = Vec::new();
        for (i, n) in names.iter().enumerate() {
            let at = format!("encodings[{i}]");
            let e = Encoding::parse(n)
                .ok_or_else(|| err(&at, format!("`{n}` is not an encoding: gzip, br or zstd")))?;
            if offered.iter().any(|(o, _)| *o == e) {
                return Err(err(&at, format!("`{n}` is named twice")));
            }
            let level = match e {
                Encoding::Gzip => match levels.gzip.unwrap_or(6) {
                    l @ 1..=9 => l as i32,
                    _ => return Err(err("levels.gzip", "from 1 to 9")),
                },
                Encoding::Brotli => match levels.br.unwrap_or(4) {
                    l @ 0..=11 => l as i32,
                    _ => return Err(err("levels.br", "from 0 to 11")),
                },
                Encoding::Zstd => match levels.zstd.unwrap_or(3) {
                    l @ 1..=19 => l,
                    _ => return Err(err("levels.zstd", "from 1 to 19")),
                },
            };
            offered.push((e, level));
        }
        let types: Vec<String> = match s.content_types {
            Some(t) => t.iter().map(|t| t.trim().to_ascii_lowercase()).collect(),
            None => DEFAULT_TYPES.iter().map(|t| (*t).to_owned()).collect(),
        };
        for (i, t) in types.iter().enumerate() {
            let ok = t.split_once('/').is_some_and(|(a, b)| {
                !a.is_empty() && !b.is_empty() && !a.contains('*') && (b == "*" || !b.contains('*'))
            });
            if !ok {
                return Err(err(
                    &format!("contentTypes[{i}]"),
                    format!("`{t}` is not a media type (`text/html`, or `text/*`)"),
                ));
            }
        }
        Ok(Compress {
            offered,
            min_size: s.min_size.map_or(1024, |b| b.0),
            types,
        })
    }
}

/// The q-value the client's `Accept-Encoding` gives `coding` (`None`: not mentioned, nor by `*`).
fn q_of(accept: &str, coding: &str) -> Option<f32> {
    let mut star = None;
    for item in accept.split(',') {
        let mut parts = item.split(';');
        let name = parts.next().unwrap_or("").trim();
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q=").or(p.trim().strip_prefix("Q=")))
            .find_map(|v| v.trim().parse::<f32>().ok())
            .unwrap_or(1.0)
            .clamp(0.0, 1.0);
        if name.eq_ignore_ascii_case(coding)
            || (coding == "gzip" && name.eq_ignore_ascii_case("x-gzip"))
        {
            return Some(q);
        }
        if name == "*" {
            star = Some(q);
        }
    }
    star
}

impl Compress {
    /// The encoding for a client that sent `accept` (`None`: identity).
    fn choose(&self, accept: &str) -> Option<(Encoding, i32)> {
        let mut best: Option<((Encoding, i32), f32)> = None;
        for &(e, level) in &self.offered {
            let q = q_of(accept, e.token()).unwrap_or(0.0);
            if q > 0.0 && best.is_none_or(|(_, b)| q > b) {
                best = Some(((e, level), q));
            }
        }
        best.map(|(e, _)| e)
    }

    /// Whether the media type of `content_type` is one this policy encodes (the configured
    /// types are lower case; the comparison ignores case).
    fn compressible(&self, content_type: &str) -> bool {
        let media = content_type.split(';').next().unwrap_or("").trim();
        let Some((ty, sub)) = media.split_once('/') else {
            return false;
        };
        let ends_with = |suffix: &str| {
            let sub = sub.as_bytes();
            sub.len() >= suffix.len()
                && sub[sub.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
        };
        self.types.iter().any(|t| match t.strip_suffix("/*") {
            Some(whole) => whole.eq_ignore_ascii_case(ty),
            None => t.eq_ignore_ascii_case(media),
        }) || (self.types.iter().any(|t| t == "application/json") && ends_with("+json"))
            || (self.types.iter().any(|t| t == "application/xml") && ends_with("+xml"))
    }
}

impl Policy for Compress {
    fn name(&self) -> &'static str {
        "compress"
    }

    /// Notes the encoding the client's `Accept-Encoding` and the settings agree on.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let chosen = if ex.request.method == http::Method::HEAD {
            None
        } else {
            let mut values = ex.request.headers.get_all(header::ACCEPT_ENCODING).iter();
            match (values.next(), values.next()) {
                (None, _) => None,
                // The usual case: one field, read in place.
                (Some(v), None) => self.choose(v.to_str().unwrap_or("")),
                // Several fields are one list.
                (Some(_), Some(_)) => self.choose(
                    &ex.request
                        .headers
                        .get_all(header::ACCEPT_ENCODING)
                        .iter()
                        .filter_map(|v| v.to_str().ok())
                        .collect::<Vec<_>>()
                        .join(","),
                ),
            }
        };
        ex.extensions.insert(Chosen(chosen));
        Outcome::Continue
    }

    /// Encodes a response that qualifies, as it streams.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        let chosen = ex.extensions.get::<Chosen>().and_then(|c| c.0);
        let Some(response) = ex.response.as_mut() else {
            return Outcome::Continue;
        };
        let h = response.headers();
        let status = response.status();
        let qualifies = !status.is_informational()
            && status != http::StatusCode::NO_CONTENT
            && status != http::StatusCode::NOT_MODIFIED
            && status != http::StatusCode::PARTIAL_CONTENT
            && !h.contains_key(header::CONTENT_RANGE)
            && h.get(header::CONTENT_ENCODING)
                .is_none_or(|v| v.as_bytes().eq_ignore_ascii_case(b"identity"))
            && !h
                .get_all(header::CACHE_CONTROL)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .any(|d| d.trim().eq_ignore_ascii_case("no-transform"))
            && h.get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|t| self.compressible(t));
        if !qualifies {
            return Outcome::Continue;
        }
        let announced = h
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if announced.is_some_and(|n| n < self.min_size) {
            return Outcome::Continue;
        }
        let headers = response.headers_mut();
        add_vary(headers);
        let Some((encoding, level)) = chosen else {
            return Outcome::Continue;
        };
        headers.remove(header::CONTENT_LENGTH);
        headers.insert(
            header::CONTENT_ENCODING,
            HeaderValue::from_static(encoding.token()),
        );
        if let Some(etag) = headers.get(header::ETAG) {
            if !etag.as_bytes().starts_with(b"W/") {
                let mut weak = b"W/".to_vec();
                weak.extend_from_slice(etag.as_bytes());
                if let Ok(v) = HeaderValue::from_bytes(&weak) {
                    headers.insert(header::ETAG, v);
                }
            }
        }
        let body = std::mem::take(response.body_mut());
        *response.body_mut() = Body::stream(encode::Encoded::new(body, encoding, level));
        Outcome::Continue
    }
}

/// Adds `Accept-Encoding` to `Vary` unless it is there (or `Vary: *`).
fn add_vary(headers: &mut http::HeaderMap) {
    let present = headers
        .get_all(header::VARY)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim() == "*" || t.trim().eq_ignore_ascii_case("accept-encoding"));
    if !present {
        headers.append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    }
}
