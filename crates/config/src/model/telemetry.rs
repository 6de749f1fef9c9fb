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
}

/// Prometheus metrics.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MetricsConfig {
    /// Count requests, tries, rejections and connections (default true).
    #[serde(default)]
    pub enabled: Option<Flag>,
}
