//! `statisticsCSV`: Membrane's exchange statistics as a CSV file — one line per exchange,
//! written when its response passes back through the policy, with Membrane's columns: status,
//! time, API, method, path, client, server, request content type and length, response content
//! type and length, duration in milliseconds. Values are separated by `;` (each followed by one,
//! as Membrane writes them); a value holding `;`, `"` or a line break is quoted. The file and
//! its folders are created at load, with the header line when the file is empty.

use std::io::Write;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use http::header;
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::civil::Civil;
use turnpike_core::{CompileContext, CompileError, Exchange, Outcome, Policy, PolicyFactory};

use turnpike_telemetry::lines::LineSink;

use crate::err;

/// `statisticsCSV`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StatisticsCsvSettings {
    /// The CSV file (relative to the configuration file); lines are appended.
    pub file: String,
}

/// When the request reached the policy.
#[derive(Debug, Clone, Copy)]
struct Started(SystemTime, Instant);

/// The compiled `statisticsCSV` policy.
#[derive(Debug)]
pub struct StatisticsCsv {
    api: String,
    file: Arc<LineSink>,
}

const HEADER: [&str; 12] = [
    "Status Code",
    "Time",
    "Rule",
    "Method",
    "Path",
    "Client",
    "Server",
    "Request Content-Type",
    "Request Content Length",
    "Response Content-Type",
    "Response Content Length",
    "Duration",
];

/// `v` as a CSV field: quoted when it holds the separator, a quote or a line break.
fn field(v: &str, out: &mut String) {
    if v.contains([';', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&v.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(v);
    }
    out.push(';');
}

impl PolicyFactory for StatisticsCsv {
    const NAME: &'static str = "statisticsCSV";
    type Settings = StatisticsCsvSettings;

    fn compile(c: StatisticsCsvSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let path = ctx.base_dir.join(&c.file);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| err("file", format!("cannot create {}: {e}", dir.display())))?;
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| err("file", format!("cannot open {}: {e}", path.display())))?;
        let empty = file.metadata().map(|m| m.len() == 0).unwrap_or(false);
        if empty {
            let mut line = String::new();
            for h in HEADER {
                field(h, &mut line);
            }
            writeln!(file, "{line}")
                .map_err(|e| err("file", format!("cannot write {}: {e}", path.display())))?;
        }
        Ok(StatisticsCsv {
            api: ctx.scope.api_name.clone(),
            file: LineSink::file(path, file, "the statistics"),
        })
    }
}

impl StatisticsCsv {
    fn line(&self, ex: &Exchange) -> String {
        let (at, started) = ex
            .extensions
            .get::<Started>()
            .map_or_else(|| (SystemTime::now(), Instant::now()), |s| (s.0, s.1));
        let c = Civil::of(at);
        let text = |h: Option<&http::HeaderValue>| {
            h.and_then(|v| v.to_str().ok()).unwrap_or("").to_owned()
        };
        let mut line = String::with_capacity(200);
        let (status, res_type, res_len) = match &ex.response {
            Some(r) => (
                r.status().as_u16().to_string(),
                text(r.headers().get(header::CONTENT_TYPE)),
                ex.response_bytes()
                    .map(|b| b.len().to_string())
                    .unwrap_or_else(|| text(r.headers().get(header::CONTENT_LENGTH))),
            ),
            None => (String::new(), String::new(), String::new()),
        };
        field(&status, &mut line);
        field(
            &format!(
                "{}-{:02}-{:02} {:02}:{:02}:{:02}",
                c.year, c.month, c.day, c.hour, c.minute, c.second
            ),
            &mut line,
        );
        field(&self.api, &mut line);
        field(ex.request.method.as_str(), &mut line);
        field(
            ex.original_uri.path_and_query().map_or("/", |p| p.as_str()),
            &mut line,
        );
        field(&ex.client.ip().to_string(), &mut line);
        field(&text(ex.request.headers.get(header::HOST)), &mut line);
        field(
            &text(ex.request.headers.get(header::CONTENT_TYPE)),
            &mut line,
        );
        field(
            &ex.request_bytes()
                .map(|b| b.len().to_string())
                .unwrap_or_else(|| text(ex.request.headers.get(header::CONTENT_LENGTH))),
            &mut line,
        );
        field(&res_type, &mut line);
        field(&res_len, &mut line);
        field(&started.elapsed().as_millis().to_string(), &mut line);
        line
    }
}

impl Policy for StatisticsCsv {
    fn name(&self) -> &'static str {
        "statisticsCSV"
    }

    fn response_needs_request(&self) -> bool {
        true
    }

    fn files(&self) -> Vec<std::path::PathBuf> {
        Vec::new()
    }

    /// Notes when the request arrived.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        if ex.extensions.get::<Started>().is_none() {
            ex.extensions
                .insert(Started(SystemTime::now(), Instant::now()));
        }
        Outcome::Continue
    }

    /// Appends the exchange's line.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        let mut line = self.line(ex);
        line.push('\n');
        turnpike_telemetry::lines::push(&self.file, line.as_bytes());
        Outcome::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};

    #[test]
    fn header_once_and_a_line_per_exchange() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("logs/stats.csv");
        let compile = || {
            StatisticsCsv::compile(
                serde_json::from_value(serde_json::json!({ "file": file.to_str().unwrap() }))
                    .unwrap(),
                &plain(),
            )
            .unwrap()
        };
        let p = compile();
        let mut ex = exchange(
            "POST",
            "/a;b?q=1",
            &[("host", "backend:8080"), ("content-type", "text/plain")],
            "hello",
        );
        p.on_request(&mut ex);
        ex.response = Some(
            http::Response::builder()
                .status(201)
                .header("content-type", "application/json")
                .header("content-length", "7")
                .body(turnpike_core::Body::Empty)
                .unwrap(),
        );
        p.on_response(&mut ex);
        turnpike_telemetry::lines::flush();
        let _again = compile();
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].starts_with("Status Code;Time;Rule;"), "{text}");
        let cols: Vec<&str> = lines[1].split(';').collect();
        assert_eq!(cols[0], "201");
        assert_eq!(cols[3], "POST");
        assert_eq!(lines[1].matches("\"/a;b?q=1\"").count(), 1, "{text}");
        assert!(
            lines[1].contains(";backend:8080;text/plain;5;application/json;7;"),
            "{text}"
        );
    }
}
