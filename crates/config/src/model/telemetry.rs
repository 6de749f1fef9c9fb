//! The `telemetry:` document: metrics, traces and the store of recent exchanges.

use schemars::JsonSchema;
use serde::Deserialize;

use crate::units::Flag;

/// What the gateway reports about its traffic (`telemetry:` document).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TelemetryConfig {
    /// Prometheus metrics, served at `/metrics` on the admin listener.
    #[serde(default)]
    pub metrics: Option<MetricsConfig>,
    /// OpenTelemetry traces, exported with OTLP.
    #[serde(default)]
    pub tracing: Option<TracingConfig>,
    /// The last exchanges, kept in memory for the web console.
    #[serde(default)]
    pub exchange_store: Option<ExchangeStoreConfig>,
}

/// The store of recent exchanges.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExchangeStoreConfig {
    /// Exchanges kept (default 1000); `0` keeps none.
    #[serde(default)]
    pub size: Option<usize>,
    /// The first bytes of each body kept (default 4KB).
    #[serde(default)]
    pub body_bytes: Option<crate::units::ByteSize>,
}

/// OpenTelemetry traces.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TracingConfig {
    /// The collector: `http://host:4318` for OTLP/HTTP (spans are posted to `/v1/traces`
    /// below it), `http://host:4317` for gRPC; `https://` for TLS (see `ssl`).
    pub endpoint: String,
    /// `http/protobuf` (default) or `grpc`.
    #[serde(default)]
    pub protocol: Option<String>,
    /// Headers (HTTP) or metadata (gRPC) sent with every export, such as an API key.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    /// `service.name` of the spans (default `turnpike`).
    #[serde(default)]
    pub service_name: Option<String>,
    /// Further resource attributes (`deployment.environment: prod`).
    #[serde(default)]
    pub resource_attributes: std::collections::BTreeMap<String, String>,
    /// Which requests are traced.
    #[serde(default)]
    pub sampling: Option<SamplingConfig>,
    /// Spans waiting for export at most; more are dropped and counted (default 8192).
    #[serde(default)]
    pub queue_size: Option<usize>,
    /// Time an export may take (default 5s).
    #[serde(default)]
    pub timeout: Option<crate::units::Duration>,
    /// TLS to an `https://` collector: `truststore` (a PEM bundle of the CAs to trust instead of
    /// the system's), `certificate` + `key` (PEM, a client certificate for mutual TLS),
    /// `serverName` (the name checked in the collector's certificate instead of the endpoint's
    /// host).
    #[serde(default)]
    pub ssl: Option<crate::TargetSsl>,
}

/// Head sampling.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SamplingConfig {
    /// The share of requests traced when the caller did not decide: `1%`, `0.01` (default
    /// `100%`).
    #[serde(default)]
    pub ratio: Option<Ratio>,
    /// Follow the caller's decision (the sampled flag of its `traceparent`) (default true).
    #[serde(default)]
    pub parent_based: Option<Flag>,
}

/// A share: a number from 0 to 1, or a percentage (`5%`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Ratio {
    /// 0 to 1.
    Number(f64),
    /// `5%`.
    Percent(String),
}

/// Prometheus metrics.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MetricsConfig {
    /// Count requests, tries, rejections and connections (default true).
    #[serde(default)]
    pub enabled: Option<Flag>,
}
