//! The access log: one line per request (JSON, or the NCSA common or combined format), on
//! standard output or appended to a file that SIGUSR1 reopens (for `logrotate`), for every
//! request or a sampled share of errors and successes. Made when the response head is sent and
//! handed to [`turnpike_telemetry::lines`], which writes it from its own thread.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{Method, StatusCode, Version};
use turnpike_snapshot::{AccessLogSettings, LogField, LogFormat, LogOutput};
use turnpike_telemetry::lines::{self, LineSink};

/// What is logged about one request.
pub struct AccessRecord<'a> {
    /// Client address.
    pub client: SocketAddr,
    /// Request method.
    pub method: &'a Method,
    /// Request path and query as received.
    pub uri: &'a str,
    /// The request's HTTP version.
    pub version: Version,
    /// The API that took it (None: no route).
    pub api: Option<&'a str>,
    /// Status sent to the client.
    pub status: StatusCode,
    /// Response body size, when announced.
    pub bytes: Option<u64>,
    /// Time from request head to response head.
    pub elapsed: Duration,
    /// Status the backend answered, when it was called.
    pub upstream_status: Option<StatusCode>,
    /// Why the gateway answered itself with an error, if it did.
    pub error: Option<&'a str>,
    /// The consumer an auth policy identified.
    pub consumer: Option<&'a str>,
    /// The request id (also in the response and sent to the backend).
    pub request_id: &'a str,
    /// The node that answered (`host:port`).
    pub upstream: Option<&'a str>,
    /// The `User-Agent` header.
    pub user_agent: Option<&'a str>,
    /// The `Referer` header.
    pub referer: Option<&'a str>,
}

/// Whether a request with this status is logged under `s`'s sampling.
pub fn sampled(s: &AccessLogSettings, status: StatusCode) -> bool {
    let threshold = if status.as_u16() >= 400 {
        s.errors_threshold
    } else {
        s.successes_threshold
    };
    threshold >= turnpike_snapshot::settings::ALL
        || (turnpike_telemetry::trace::random() >> 11) < threshold
}

/// Queues `r` as one line in `s`'s format for its output ([`turnpike_telemetry::lines`]: no
/// system call on the worker). Errors writing the log are ignored (the request has been served
/// already).
pub fn write(r: &AccessRecord<'_>, s: &AccessLogSettings) {
    let mut line = match s.format {
        LogFormat::Json => json_line(r, &s.fields),
        LogFormat::Common => common_line(r, false),
        LogFormat::Combined => common_line(r, true),
    };
    line.push('\n');
    let sink = match &s.output {
        LogOutput::Stdout => &SINKS.0,
        LogOutput::File(_) => &SINKS.1,
    };
    lines::push(sink, line.as_bytes());
}

/// Standard output, and the open log file.
static SINKS: std::sync::LazyLock<(Arc<LineSink>, Arc<LineSink>)> =
    std::sync::LazyLock::new(|| {
        (
            LineSink::new(|b| {
                let _ = std::io::stdout().lock().write_all(b);
            }),
            LineSink::new(|b| {
                let mut file = FILE.lock().unwrap_or_else(|e| e.into_inner());
                if let Some((_, f)) = file.as_mut() {
                    let _ = f.write_all(b);
                }
            }),
        )
    });

fn version_str(v: Version) -> &'static str {
    match v {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

/// One JSON object with `fields` in their order (absent values left out).
fn json_line(r: &AccessRecord<'_>, fields: &[LogField]) -> String {
    let mut out = String::with_capacity(256);
    out.push('{');
    for f in fields {
        let v: Option<serde_json::Value> = match f {
            LogField::Ts => Some(
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_secs_f64()
                    .into(),
            ),
            LogField::Client => Some(r.client.ip().to_string().into()),
            LogField::Method => Some(r.method.as_str().into()),
            LogField::Uri => Some(r.uri.into()),
            LogField::Status => Some(r.status.as_u16().into()),
            LogField::DurationMs => Some(((r.elapsed.as_secs_f64() * 1e6).round() / 1e3).into()),
            LogField::Api => r.api.map(Into::into),
            LogField::UpstreamStatus => r.upstream_status.map(|s| s.as_u16().into()),
            LogField::Upstream => r.upstream.map(Into::into),
            LogField::Consumer => r.consumer.map(Into::into),
            LogField::Error => r.error.map(Into::into),
            LogField::RequestId => Some(r.request_id.into()),
            LogField::UserAgent => r.user_agent.map(Into::into),
            LogField::Referer => r.referer.map(Into::into),
            LogField::Protocol => Some(version_str(r.version).into()),
        };
        if let Some(v) = v {
            if out.len() > 1 {
                out.push(',');
            }
            out.push('"');
            out.push_str(f.name());
            out.push_str("\":");
            out.push_str(&v.to_string());
        }
    }
    out.push('}');
    out
}

/// `host ident user [time] "request" status bytes` (and `"referer" "agent"` when combined).
fn common_line(r: &AccessRecord<'_>, combined: bool) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(160);
    let _ = write!(
        s,
        "{} - {} [{}] \"{} {} {}\" {} {}",
        r.client.ip(),
        r.consumer.map_or("-".into(), quoted_free),
        clf_time(SystemTime::now()),
        r.method,
        quoted_free(r.uri),
        version_str(r.version),
        r.status.as_u16(),
        r.bytes.map_or("-".into(), |b| b.to_string()),
    );
    if combined {
        let _ = write!(
            s,
            " \"{}\" \"{}\"",
            r.referer.map_or("-".into(), quoted_free),
            r.user_agent.map_or("-".into(), quoted_free)
        );
    }
    s
}

/// `v` with quotes, backslashes and control characters escaped, as Apache writes them.
fn quoted_free(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// `10/Oct/2000:13:55:36 +0000`.
fn clf_time(t: SystemTime) -> String {
    let c = turnpike_core::civil::Civil::of(t);
    format!(
        "{:02}/{}/{}:{:02}:{:02}:{:02} +0000",
        c.day,
        c.month_name(),
        c.year,
        c.hour,
        c.minute,
        c.second
    )
}

/// The open access log file, if the output is a file.
static FILE: Mutex<Option<(PathBuf, std::fs::File)>> = Mutex::new(None);

/// Opens the access log file the settings name (or closes it when they name none); a file
/// that stays the same stays open.
pub fn set_output(settings: Option<&AccessLogSettings>) -> std::io::Result<()> {
    let want = match settings.map(|s| &s.output) {
        Some(LogOutput::File(p)) => Some(p.clone()),
        _ => None,
    };
    if FILE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(|(p, _)| p)
        == want.as_ref()
    {
        return Ok(());
    }
    // The lines written so far go where they were meant to.
    lines::flush();
    let mut file = FILE.lock().unwrap_or_else(|e| e.into_inner());
    *file = match want {
        Some(p) => Some((p.clone(), open(&p)?)),
        None => None,
    };
    Ok(())
}

/// Reopens the access log file (SIGUSR1, after `logrotate` moved it away).
pub fn reopen() -> std::io::Result<()> {
    lines::flush();
    let mut file = FILE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((p, f)) = file.as_mut() {
        *f = open(p)?;
    }
    Ok(())
}

fn open(p: &std::path::Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    static GET: Method = Method::GET;

    fn record() -> AccessRecord<'static> {
        AccessRecord {
            client: SocketAddr::from(([192, 0, 2, 1], 5555)),
            method: &GET,
            uri: "/a?b=\"c\"",
            version: Version::HTTP_11,
            api: Some("orders"),
            status: StatusCode::OK,
            bytes: Some(42),
            elapsed: Duration::from_micros(1500),
            upstream_status: None,
            error: None,
            consumer: Some("alice"),
            request_id: "r1",
            upstream: None,
            user_agent: Some("curl/8"),
            referer: None,
        }
    }

    #[test]
    fn formats() {
        let r = record();
        let line = common_line(&r, true);
        let re = regex_like(&line);
        assert!(re, "{line}");
        assert!(line.starts_with("192.0.2.1 - alice ["), "{line}");
        assert!(
            line.ends_with("] \"GET /a?b=\\\"c\\\" HTTP/1.1\" 200 42 \"-\" \"curl/8\""),
            "{line}"
        );
        let json = json_line(
            &r,
            &[
                LogField::Status,
                LogField::Api,
                LogField::UserAgent,
                LogField::Upstream,
            ],
        );
        assert_eq!(
            json,
            r#"{"status":200,"api":"orders","userAgent":"curl/8"}"#
        );
        let parsed: serde_json::Value =
            serde_json::from_str(&json_line(&r, &AccessLogSettings::default_json().fields))
                .unwrap();
        assert_eq!(parsed["uri"], "/a?b=\"c\"");
    }

    fn regex_like(line: &str) -> bool {
        // [dd/Mon/yyyy:HH:MM:SS +0000]
        let open = line.find('[').unwrap_or(0);
        let t = &line[open + 1..open + 27];
        t.len() == 26 && &t[2..3] == "/" && &t[6..7] == "/" && t.ends_with(" +0000")
    }

    #[test]
    fn clf_dates() {
        let t = UNIX_EPOCH + Duration::from_secs(971_186_136); // 2000-10-10T13:55:36Z
        assert_eq!(clf_time(t), "10/Oct/2000:13:55:36 +0000");
        assert_eq!(clf_time(UNIX_EPOCH), "01/Jan/1970:00:00:00 +0000");
        let leap = UNIX_EPOCH + Duration::from_secs(1_709_210_096); // 2024-02-29T12:34:56Z
        assert_eq!(clf_time(leap), "29/Feb/2024:12:34:56 +0000");
    }

    #[test]
    fn sampling() {
        let mut s = AccessLogSettings::default_json();
        assert!(sampled(&s, StatusCode::OK));
        s.successes_threshold = 0;
        assert!(!sampled(&s, StatusCode::OK));
        assert!(sampled(&s, StatusCode::BAD_GATEWAY));
        s.successes_threshold = turnpike_snapshot::settings::ALL / 10;
        let n = (0..10_000).filter(|_| sampled(&s, StatusCode::OK)).count();
        assert!((800..1200).contains(&n), "{n}");
    }
}
