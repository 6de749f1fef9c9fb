//! `prometheus`: answers with the gateway's metrics in the Prometheus text format (OpenMetrics
//! when the client asks for it), as Membrane's `prometheus` does on an API of its own. The same
//! metrics are served at `/metrics` on the admin listener, which adds the health of upstream
//! nodes.

use http::{header, HeaderValue, Response};
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::PolicyFactory;
use turnpike_core::{Body, CompileContext, CompileError, Exchange, Outcome, Phases, Policy};

/// `prometheus` has no settings.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrometheusSettings {}

/// The compiled `prometheus` policy.
#[derive(Debug)]
pub struct Prometheus;

impl PolicyFactory for Prometheus {
    const NAME: &'static str = "prometheus";
    const PHASES: Phases = Phases::REQUEST;
    const ANSWERS: bool = true;
    type Settings = PrometheusSettings;

    fn compile(_: PrometheusSettings, _: &CompileContext<'_>) -> Result<Self, CompileError> {
        Ok(Prometheus)
    }
}

impl Policy for Prometheus {
    fn name(&self) -> &'static str {
        "prometheus"
    }

    /// Answers with the metrics.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let accept = ex
            .request
            .headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok());
        let open = turnpike_telemetry::metrics::wants_openmetrics(accept);
        let text = turnpike_telemetry::metrics::render(open, &[], &[]);
        let mut r = Response::new(Body::full(text));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(if open {
                "application/openmetrics-text; version=1.0.0; charset=utf-8"
            } else {
                "text/plain; version=0.0.4; charset=utf-8"
            }),
        );
        Outcome::Respond(r)
    }
}
