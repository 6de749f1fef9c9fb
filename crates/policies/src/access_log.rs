//! `accessLog`: Membrane's access log as a policy (in `global:` for every API, or in one API's
//! flow). Writes one line per exchange when its response passes back through the policy (also
//! for requests a policy rejected): the client, the time the request was received (in
//! `dateTimePattern`, UTC), the request line, the status, the response size, then each
//! `additionalPatternList` field as `name="value"` (an expression evaluated on the exchange:
//! `headers['Referer']`, `jsonPath('$.orderId')` on the request body,
//! `response?.header['Content-Type']`, `exchange.proxy.name`). Lines go to the gateway's log
//! (target `turnpike::access_log`) or, with `output`, are appended to a file.

use std::sync::Arc;
use std::time::SystemTime;

use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_config::units::Flag;
use turnpike_core::civil::Civil;
use turnpike_core::PolicyFactory;
use turnpike_core::{BodyNeed, CompileContext, CompileError, Exchange, Outcome, Policy};

use turnpike_telemetry::lines::LineSink;

use crate::condition::ValueExpr;
use crate::err;

/// `accessLog`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AccessLogSettings {
    /// Written for a field without a value (default `-`).
    #[serde(default)]
    pub default_value: Option<String>,
    /// The time's format, in Java's `DateTimeFormatter` letters (`dd/MMM/yyyy:HH:mm:ss Z`;
    /// default `dd/MM/yyyy:HH:mm:ss Z`); times are UTC.
    #[serde(default)]
    pub date_time_pattern: Option<String>,
    /// Leave out the response size (the response is then streamed, not read to count it).
    #[serde(default)]
    pub exclude_payload_size: Flag,
    /// More fields: a name and an expression (CEL, or Membrane's SpEL).
    #[serde(default)]
    pub additional_pattern_list: Vec<AdditionalField>,
    /// A file to append the lines to, instead of the gateway's log.
    #[serde(default)]
    pub output: Option<String>,
}

/// One more field of the line.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AdditionalField {
    /// The field's name.
    pub name: String,
    /// Its value: an expression on the exchange.
    pub expression: String,
    /// Written when the expression has no value (default: the policy's `defaultValue`).
    #[serde(default)]
    pub default_value: Option<String>,
}

/// One piece of a date-time pattern.
#[derive(Debug, Clone, PartialEq)]
enum TimePart {
    Lit(String),
    Year4,
    Year2,
    MonthName,
    Month2,
    Month,
    Day2,
    Day,
    Hour2,
    Minute2,
    Second2,
    Millis3,
    /// `+0000`.
    Zone,
    /// `Z` (ISO, for UTC).
    ZoneIso,
}

/// Compiles a Java `DateTimeFormatter` pattern (the letters Membrane's examples use).
fn time_pattern(p: &str) -> Result<Vec<TimePart>, String> {
    let mut parts = Vec::new();
    let chars: Vec<char> = p.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let run = chars[i..].iter().take_while(|&&x| x == c).count();
        let part = match (c, run) {
            ('\'', _) => {
                let end = chars[i + 1..]
                    .iter()
                    .position(|&x| x == '\'')
                    .ok_or_else(|| format!("unclosed quote in `{p}`"))?;
                let text: String = chars[i + 1..i + 1 + end].iter().collect();
                parts.push(TimePart::Lit(if text.is_empty() { "'".into() } else { text }));
                i += end + 2;
                continue;
            }
            ('y' | 'u', 2) => TimePart::Year2,
            ('y' | 'u', _) => TimePart::Year4,
            ('M', 3) => TimePart::MonthName,
            ('M', 2) => TimePart::Month2,
            ('M', 1) => TimePart::Month,
            ('d', 2) => TimePart::Day2,
            ('d', 1) => TimePart::Day,
            ('H', 2) => TimePart::Hour2,
            ('m', 2) => TimePart::Minute2,
            ('s', 2) => TimePart::Second2,
            ('S', 3) => TimePart::Millis3,
            ('Z', 1..=3) | ('x', 2) => TimePart::Zone,
            ('X', _) => TimePart::ZoneIso,
            (c, _) if c.is_ascii_alphabetic() => {
                return Err(format!(
                    "`{}` in `{p}` is not supported (yyyy, yy, MMM, MM, M, dd, d, HH, mm, ss, SSS, Z, X and 'text' are)",
                    chars[i..i + run].iter().collect::<String>()
                ))
            }
            (c, n) => TimePart::Lit(std::iter::repeat_n(c, n).collect()),
        };
        parts.push(part);
        i += run;
    }
    Ok(parts)
}

fn format_time(parts: &[TimePart], t: SystemTime) -> String {
    use std::fmt::Write as _;
    let c = Civil::of(t);
    let mut out = String::with_capacity(32);
    for p in parts {
        let _ = match p {
            TimePart::Lit(s) => write!(out, "{s}"),
            TimePart::Year4 => write!(out, "{}", c.year),
            TimePart::Year2 => write!(out, "{:02}", c.year.rem_euclid(100)),
            TimePart::MonthName => write!(out, "{}", c.month_name()),
            TimePart::Month2 => write!(out, "{:02}", c.month),
            TimePart::Month => write!(out, "{}", c.month),
            TimePart::Day2 => write!(out, "{:02}", c.day),
            TimePart::Day => write!(out, "{}", c.day),
            TimePart::Hour2 => write!(out, "{:02}", c.hour),
            TimePart::Minute2 => write!(out, "{:02}", c.minute),
            TimePart::Second2 => write!(out, "{:02}", c.second),
            TimePart::Millis3 => write!(out, "{:03}", c.millis),
            TimePart::Zone => write!(out, "+0000"),
            TimePart::ZoneIso => write!(out, "Z"),
        };
    }
    out
}

/// `v` with quotes, backslashes and control characters escaped (Membrane's `escapeQuotes`).
fn escaped(v: &str, out: &mut String) {
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
}

/// When the request reached the first `accessLog` of its chain.
#[derive(Debug, Clone, Copy)]
struct Received(SystemTime);

/// The compiled `accessLog` policy.
#[derive(Debug)]
pub struct AccessLog {
    default_value: String,
    time: Vec<TimePart>,
    payload_size: bool,
    fields: Vec<(String, ValueExpr, Option<String>)>,
    output: Option<Arc<LineSink>>,
}

impl PolicyFactory for AccessLog {
    const NAME: &'static str = "accessLog";
    type Settings = AccessLogSettings;

    fn compile(c: AccessLogSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let time = time_pattern(
            c.date_time_pattern
                .as_deref()
                .unwrap_or("dd/MM/yyyy:HH:mm:ss Z"),
        )
        .map_err(|m| err("dateTimePattern", m))?;
        let mut fields = Vec::new();
        for (i, f) in c.additional_pattern_list.iter().enumerate() {
            if f.name.trim().is_empty() || f.name.contains(['"', '=', ' ']) {
                return Err(err(
                    &format!("additionalPatternList[{i}].name"),
                    "a field name is a word (no spaces, quotes or `=`)",
                ));
            }
            let e = ValueExpr::compile(&f.expression, None, ctx, true).map_err(|e| {
                err(
                    &format!("additionalPatternList[{i}].expression"),
                    format!("{} (line {}, column {})", e.message, e.line, e.column),
                )
            })?;
            fields.push((f.name.clone(), e, f.default_value.clone()));
        }
        let output = match &c.output {
            None => None,
            Some(o) => {
                let path = ctx.base_dir.join(o);
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .map_err(|e| err("output", format!("cannot open {}: {e}", path.display())))?;
                Some(LineSink::file(path, file, "the access log"))
            }
        };
        Ok(AccessLog {
            default_value: c.default_value.unwrap_or_else(|| "-".into()),
            time,
            payload_size: !c.exclude_payload_size.0,
            fields,
            output,
        })
    }
}

impl AccessLog {
    /// The line for `ex`, whose response is `status` with `size` bytes.
    fn line(&self, ex: &Exchange) -> String {
        use std::fmt::Write as _;
        let received = ex
            .extensions
            .get::<Received>()
            .map_or_else(SystemTime::now, |r| r.0);
        let (status, size) = match &ex.response {
            Some(r) => {
                let size = ex.response_bytes().map(|b| b.len() as u64).or_else(|| {
                    r.headers()
                        .get(http::header::CONTENT_LENGTH)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse().ok())
                });
                (r.status().as_u16().to_string(), size)
            }
            None => (self.default_value.clone(), None),
        };
        let version = match ex.request.version {
            http::Version::HTTP_10 => "1.0",
            http::Version::HTTP_2 => "2.0",
            _ => "1.1",
        };
        let mut line = String::with_capacity(160);
        let _ = write!(
            line,
            "{} - - [{}] \"{} ",
            ex.client.ip(),
            format_time(&self.time, received),
            ex.request.method
        );
        escaped(
            ex.original_uri.path_and_query().map_or("/", |p| p.as_str()),
            &mut line,
        );
        let _ = write!(line, " HTTP/{version}\" {status}");
        if self.payload_size {
            match size {
                Some(n) => {
                    let _ = write!(line, " {n}");
                }
                None => {
                    let _ = write!(line, " {}", self.default_value);
                }
            }
        }
        for (name, expr, default) in &self.fields {
            // Membrane writes `String.valueOf(value)`: `null` as "null"; a failed evaluation
            // as the default.
            let value = match expr.text(ex) {
                Some(v) => v.unwrap_or_else(|| "null".to_owned()),
                None => default
                    .clone()
                    .unwrap_or_else(|| self.default_value.clone()),
            };
            let _ = write!(line, " {name}=\"");
            escaped(&value, &mut line);
            line.push('"');
        }
        line
    }
}

impl Policy for AccessLog {
    fn name(&self) -> &'static str {
        "accessLog"
    }

    fn body_need(&self) -> BodyNeed {
        if self.fields.iter().any(|(_, e, _)| e.reads_body()) {
            BodyNeed::Buffer
        } else {
            BodyNeed::None
        }
    }

    fn response_body_need(&self) -> BodyNeed {
        if self.payload_size {
            BodyNeed::Buffer
        } else {
            BodyNeed::None
        }
    }

    fn response_needs_request(&self) -> bool {
        true
    }

    fn files(&self) -> Vec<std::path::PathBuf> {
        Vec::new()
    }

    /// Notes when the request was received.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        if ex.extensions.get::<Received>().is_none() {
            ex.extensions.insert(Received(SystemTime::now()));
        }
        Outcome::Continue
    }

    /// Writes the line.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        let line = self.line(ex);
        match &self.output {
            Some(sink) => {
                let mut line = line;
                line.push('\n');
                turnpike_telemetry::lines::push(sink, line.as_bytes());
            }
            None => {
                let id = ex.request_id.to_str().unwrap_or("");
                tracing::info!(target: "turnpike::access_log", request_id = id, "{line}");
            }
        }
        Outcome::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};
    use std::time::{Duration, UNIX_EPOCH};

    fn compile(yaml: serde_json::Value) -> Result<AccessLog, CompileError> {
        AccessLog::compile(serde_json::from_value(yaml).unwrap(), &plain())
    }

    #[test]
    fn time_patterns() {
        let t = UNIX_EPOCH + Duration::from_millis(971_185_336_250);
        let f = |p: &str| format_time(&time_pattern(p).unwrap(), t);
        assert_eq!(f("dd/MMM/yyyy:HH:mm:ss Z"), "10/Oct/2000:13:42:16 +0000");
        assert_eq!(f("dd/MM/yyyy:HH:mm:ss Z"), "10/10/2000:13:42:16 +0000");
        assert_eq!(f("yyyy-MM-dd'T'HH:mm:ss.SSSX"), "2000-10-10T13:42:16.250Z");
        assert_eq!(f("d.M.yy"), "10.10.00");
        assert!(time_pattern("EEE dd").unwrap_err().contains("`EEE`"));
        assert!(time_pattern("'open").is_err());
    }

    #[test]
    fn lines_with_fields() {
        let p = compile(serde_json::json!({
            "dateTimePattern": "yyyy",
            "additionalPatternList": [
                { "name": "referer", "expression": "headers['Referer']" },
                { "name": "orderId", "expression": "jsonPath('$.orderId')" },
                { "name": "type", "expression": "response?.header['Content-Type']", "defaultValue": "none" },
                { "name": "missing", "expression": "headers['X-Nope']" }
            ]
        }))
        .unwrap();
        assert_eq!(p.body_need(), BodyNeed::Buffer);
        assert_eq!(p.response_body_need(), BodyNeed::Buffer);
        let mut ex = exchange(
            "POST",
            "/shop/orders?a=b",
            &[("referer", "https://example.com/")],
            r#"{"orderId":"A-1042"}"#,
        );
        p.on_request(&mut ex);
        let line = p.line(&ex);
        let year = Civil::of(SystemTime::now()).year;
        assert_eq!(
            line,
            format!("198.51.100.7 - - [{year}] \"POST /shop/orders?a=b HTTP/1.1\" - - referer=\"https://example.com/\" orderId=\"A-1042\" type=\"none\" missing=\"null\"")
        );
        ex.response = Some(
            http::Response::builder()
                .status(201)
                .header("content-type", "application/json")
                .body(turnpike_core::Body::full(bytes::Bytes::from_static(b"{}")))
                .unwrap(),
        );
        assert!(
            p.line(&ex).contains("HTTP/1.1\" 201 2 referer="),
            "{}",
            p.line(&ex)
        );
        assert!(p.line(&ex).contains("type=\"application/json\""));
        let bare = compile(serde_json::json!({ "excludePayloadSize": true })).unwrap();
        assert_eq!(bare.response_body_need(), BodyNeed::None);
        assert!(bare.line(&ex).ends_with("HTTP/1.1\" 201"));
        assert!(compile(serde_json::json!({ "additionalPatternList": [ { "name": "x", "expression": "nope(" } ] })).is_err());
        assert!(compile(serde_json::json!({ "dateTimePattern": "QQQ" })).is_err());
    }

    #[test]
    fn escaping() {
        let mut out = String::new();
        escaped("a\"b\\c\nd\u{1}", &mut out);
        assert_eq!(out, "a\\\"b\\\\c\\nd\\u0001");
    }

    #[test]
    fn the_api_name_is_known() {
        let scope = turnpike_core::TemplateScope {
            api_name: "orders".into(),
            ..Default::default()
        };
        let ctx = CompileContext {
            scope: &scope,
            ..plain()
        };
        let p = AccessLog::compile(
            serde_json::from_value(serde_json::json!({
                "additionalPatternList": [ { "name": "api", "expression": "exchange.proxy.name" } ]
            }))
            .unwrap(),
            &ctx,
        )
        .unwrap();
        let ex = exchange("GET", "/orders", &[], "");
        assert!(p.line(&ex).ends_with(" api=\"orders\""), "{}", p.line(&ex));
    }
}
