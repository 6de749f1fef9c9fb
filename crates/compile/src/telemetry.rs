//! The `telemetry:` document compiled into the snapshot's settings: whether metrics count,
//! how requests are sampled for tracing, and where spans go.

use std::time::Duration;

use turnpike_config::{ConfigErrors, ConfigSet, Ratio};
use turnpike_snapshot::Settings;
use turnpike_telemetry::trace::{ExportSettings, Protocol, Sampling};

/// Applies the `telemetry:` document to `settings`; errors are reported with their location.
pub(crate) fn apply(set: &ConfigSet, settings: &mut Settings, errors: &mut ConfigErrors) {
    // Membrane's `openTelemetry` in `global:` stands for a `telemetry.tracing` document.
    let from_global = set.globals.iter().find_map(|g| {
        g.value
            .iter()
            .position(|p| p.name == "openTelemetry")
            .map(|i| (g, i))
    });
    if let Some((g, i)) = from_global {
        let at = |k: &str| {
            format!(
                "[{i}].openTelemetry{}{k}",
                if k.is_empty() { "" } else { "." }
            )
        };
        if set
            .telemetry
            .as_ref()
            .is_some_and(|t| t.value.tracing.is_some())
        {
            errors.push(g.error(
                &at(""),
                "tracing is configured twice: here and in `telemetry.tracing`",
            ));
        } else {
            // The policy's own compilation reports its settings' errors.
            if let Ok(tr) = turnpike_core::settings::parse_all::<
                turnpike_policies::open_telemetry::OpenTelemetrySettings,
            >(g.value[i].settings.clone())
            .map_err(|_| (String::new(), String::new()))
            .and_then(|o| o.tracing())
            {
                apply_tracing(
                    &tr,
                    crate::base_dir(g),
                    &|k, m| g.error(&at(k), m),
                    settings,
                    errors,
                );
            }
        }
    }
    let Some(t) = &set.telemetry else {
        return;
    };
    settings.metrics = t
        .value
        .metrics
        .as_ref()
        .and_then(|m| m.enabled)
        .is_none_or(|f| f.0);
    if let Some(store) = &t.value.exchange_store {
        let size = store.size.unwrap_or(1000);
        let body = store.body_bytes.map_or(4096, |b| b.0 as usize);
        if size > 100_000 {
            errors.push(t.error("exchangeStore.size", "at most 100000 exchanges"));
        } else if body > 1 << 20 {
            errors.push(t.error("exchangeStore.bodyBytes", "at most 1MB of each body"));
        } else if size > 0 {
            settings.exchange_store = Some((size, body));
        }
    }
    let Some(tr) = &t.value.tracing else {
        return;
    };
    apply_tracing(
        tr,
        crate::base_dir(t),
        &|k, m| t.error(format!("tracing.{k}").trim_end_matches('.'), m),
        settings,
        errors,
    );
}

/// `telemetry.tracing` (or what Membrane's `openTelemetry` stands for) into the settings;
/// `base` is the folder relative paths start from; `error` makes an error at a key below the
/// tracing settings.
fn apply_tracing(
    tr: &turnpike_config::TracingConfig,
    base: &std::path::Path,
    error: &dyn Fn(&str, &str) -> turnpike_config::ConfigError,
    settings: &mut Settings,
    errors: &mut ConfigErrors,
) {
    let protocol = match tr.protocol.as_deref() {
        None | Some("http/protobuf") => Protocol::HttpProtobuf,
        Some("grpc") => Protocol::Grpc,
        Some(other) => {
            errors.push(error(
                "protocol",
                &format!("`{other}` is not a protocol: `http/protobuf` or `grpc`"),
            ));
            return;
        }
    };
    let (rest, https) = match (
        tr.endpoint.strip_prefix("http://"),
        tr.endpoint.strip_prefix("https://"),
    ) {
        (Some(rest), _) => (rest, false),
        (_, Some(rest)) => (rest, true),
        _ => {
            errors.push(error("endpoint", "must be an http:// or https:// URL"));
            return;
        }
    };
    if rest.trim_end_matches('/').is_empty() || rest.contains(['?', '#']) {
        errors.push(error("endpoint", "must be a URL with a host"));
        return;
    }
    let tls = match (https, &tr.ssl) {
        (false, None) => None,
        (false, Some(_)) => {
            errors.push(error("ssl", "TLS settings need an https:// endpoint"));
            return;
        }
        (true, ssl) => {
            match turnpike_tls::PemTls::read(ssl.as_ref(), base, "the trace collector") {
                Ok(t) => Some(t),
                Err((key, msg)) => {
                    errors.push(error(&format!("ssl{key}"), &msg));
                    return;
                }
            }
        }
    };
    let sampling = tr.sampling.clone().unwrap_or_default();
    let ratio = match &sampling.ratio {
        None => 1.0,
        Some(Ratio::Number(n)) => *n,
        Some(Ratio::Percent(p)) => match p
            .strip_suffix('%')
            .and_then(|n| n.trim().parse::<f64>().ok())
        {
            Some(n) => n / 100.0,
            None => {
                errors.push(error(
                    "sampling.ratio",
                    &format!("`{p}` is not a share: a number from 0 to 1, or a percentage"),
                ));
                return;
            }
        },
    };
    if !(0.0..=1.0).contains(&ratio) {
        errors.push(error(
            "sampling.ratio",
            "must be between 0 and 1 (0% and 100%)",
        ));
        return;
    }
    let queue = tr.queue_size.unwrap_or(8192);
    if queue == 0 {
        errors.push(error("queueSize", "must be at least 1"));
        return;
    }
    for (k, v) in &tr.headers {
        if http::HeaderName::from_bytes(k.as_bytes()).is_err()
            || http::HeaderValue::from_str(v).is_err()
        {
            errors.push(error(&format!("headers.{k}"), "not a valid header"));
            return;
        }
    }
    settings.tracing = Some(Sampling::new(
        ratio,
        sampling.parent_based.is_none_or(|f| f.0),
    ));
    settings.trace_export = Some(ExportSettings {
        endpoint: tr.endpoint.trim_end_matches('/').to_owned(),
        protocol,
        headers: tr
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        service_name: tr.service_name.clone().unwrap_or_else(|| "turnpike".into()),
        resource: tr
            .resource_attributes
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        queue,
        timeout: tr.timeout.map_or(Duration::from_secs(5), |d| d.0),
        tls,
    });
}
