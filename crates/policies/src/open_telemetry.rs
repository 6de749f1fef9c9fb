//! `openTelemetry`: Membrane's tracing policy. In `global:` it turns on the gateway's tracing
//! (W3C trace context taken from and passed on to backends, one server span per request with
//! a span per policy, exported over OTLP) with the exporter and sampling written here — the
//! same as a `telemetry.tracing` document, which the compile stage builds from these settings
//! ([`OpenTelemetrySettings::tracing`]). The step itself does nothing per request: the
//! gateway's tracing is process-wide, so the policy stands only in `global:`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_config::units::Flag;
use turnpike_config::{Ratio, SamplingConfig, TracingConfig};
use turnpike_core::PolicyFactory;
use turnpike_core::{CompileContext, CompileError, Exchange, Outcome, Phases, Policy};

use crate::err;

/// `openTelemetry`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OpenTelemetrySettings {
    /// The share of traces kept, 0 to 1 (default 1).
    #[serde(default)]
    pub sample_rate: Option<f64>,
    /// Membrane adds bodies to spans; Turnpike does not (`true` is a load error).
    #[serde(default)]
    pub log_body: Flag,
    /// Where spans go (default OTLP/gRPC to `localhost:4317`).
    #[serde(default)]
    pub otlp_exporter: Option<OtlpExporter>,
    /// Attributes added to every span (Turnpike adds them to the trace resource).
    #[serde(default)]
    pub custom_attribute: Vec<NameValue>,
}

/// `otlpExporter`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OtlpExporter {
    /// The collector's host (default `localhost`).
    #[serde(default)]
    pub host: Option<String>,
    /// Its port (default 4317 for gRPC, 4318 for HTTP).
    #[serde(default)]
    pub port: Option<u16>,
    /// `grpc` (default) or `http`.
    #[serde(default)]
    pub transport: Option<String>,
    /// With `http`, the path below which `/v1/traces` is posted (default none).
    #[serde(default)]
    pub path: Option<String>,
    /// TLS to the collector (`https://`), trusting the system's CAs.
    #[serde(default)]
    pub secured: Flag,
    /// Headers sent with every export.
    #[serde(default)]
    pub headers: Vec<NameValue>,
}

/// A name and a value.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NameValue {
    /// The name.
    pub name: String,
    /// The value.
    pub value: String,
}

impl OpenTelemetrySettings {
    /// The `telemetry.tracing` document these settings stand for, or what is wrong (the key
    /// below `openTelemetry`, and a message).
    pub fn tracing(&self) -> Result<TracingConfig, (String, String)> {
        if self.log_body.0 {
            return Err((
                "logBody".into(),
                "bodies are not added to spans: the access log and the console's recent exchanges show them".into(),
            ));
        }
        let e = self.otlp_exporter.clone().unwrap_or_default();
        let transport = e
            .transport
            .as_deref()
            .unwrap_or("grpc")
            .to_ascii_lowercase();
        let (protocol, port) = match transport.as_str() {
            "grpc" => ("grpc", 4317),
            "http" => ("http/protobuf", 4318),
            other => {
                return Err((
                    "otlpExporter.transport".into(),
                    format!("`{other}` is not a transport: `grpc` or `http`"),
                ))
            }
        };
        let path = match (&*transport, e.path.as_deref()) {
            ("http", Some(p)) => p
                .trim_end_matches('/')
                .trim_end_matches("/v1/traces")
                .to_owned(),
            (_, Some(p)) if !p.is_empty() => {
                return Err((
                    "otlpExporter.path".into(),
                    "a path is for the `http` transport".into(),
                ))
            }
            _ => String::new(),
        };
        if let Some(r) = self.sample_rate {
            if !(0.0..=1.0).contains(&r) {
                return Err(("sampleRate".into(), "must be between 0 and 1".into()));
            }
        }
        Ok(TracingConfig {
            endpoint: format!(
                "{}://{}:{}{path}",
                if e.secured.0 { "https" } else { "http" },
                e.host.as_deref().unwrap_or("localhost"),
                e.port.unwrap_or(port)
            ),
            protocol: Some(protocol.into()),
            headers: e
                .headers
                .iter()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect(),
            service_name: Some("Membrane".into()),
            resource_attributes: self
                .custom_attribute
                .iter()
                .map(|a| (a.name.clone(), a.value.clone()))
                .collect::<BTreeMap<_, _>>(),
            sampling: Some(SamplingConfig {
                ratio: self.sample_rate.map(Ratio::Number),
                parent_based: None,
            }),
            queue_size: None,
            timeout: None,
            ssl: None,
        })
    }
}

/// The compiled `openTelemetry` policy: the marker of the tracing it turned on.
#[derive(Debug)]
pub struct OpenTelemetry;

impl PolicyFactory for OpenTelemetry {
    const NAME: &'static str = "openTelemetry";
    const PHASES: Phases = Phases::REQUEST;
    type Settings = OpenTelemetrySettings;

    fn compile(c: OpenTelemetrySettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        if !ctx.site.contains("|global ") {
            return Err(err(
                "",
                "tracing is the gateway's, for every API: put `openTelemetry` in `global:` (or use `telemetry.tracing`)",
            ));
        }
        c.tracing().map_err(|(k, m)| err(&k, m))?;
        Ok(OpenTelemetry)
    }
}

impl Policy for OpenTelemetry {
    fn name(&self) -> &'static str {
        "openTelemetry"
    }

    /// Nothing per request: the gateway traces every request.
    fn on_request(&self, _: &mut Exchange) -> Outcome {
        Outcome::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(v: serde_json::Value) -> OpenTelemetrySettings {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn exporter_settings_become_tracing() {
        let t = settings(serde_json::json!({"sampleRate": 0.5, "otlpExporter": {"host": "collector", "port": 4317, "transport": "grpc"}, "customAttribute": [{"name": "env", "value": "prod"}]}))
            .tracing()
            .unwrap();
        assert_eq!(t.endpoint, "http://collector:4317");
        assert_eq!(t.protocol.as_deref(), Some("grpc"));
        assert_eq!(t.resource_attributes["env"], "prod");
        let t = settings(
            serde_json::json!({"otlpExporter": {"transport": "http", "path": "/otel/v1/traces"}}),
        )
        .tracing()
        .unwrap();
        assert_eq!(t.endpoint, "http://localhost:4318/otel");
        assert_eq!(t.protocol.as_deref(), Some("http/protobuf"));
        assert!(settings(serde_json::json!({"logBody": true}))
            .tracing()
            .is_err());
        let secured =
            settings(serde_json::json!({"otlpExporter": {"secured": true, "host": "otel"}}))
                .tracing()
                .unwrap();
        assert_eq!(secured.endpoint, "https://otel:4317");
        assert!(settings(serde_json::json!({"sampleRate": 2.0}))
            .tracing()
            .is_err());
        assert!(
            settings(serde_json::json!({"otlpExporter": {"transport": "udp"}}))
                .tracing()
                .is_err()
        );
    }
}
