//! Distributed traces: W3C trace context read from requests and passed to backends, head
//! sampling (a ratio, and the caller's decision when it sent one), and spans exported with
//! OTLP (HTTP/protobuf or gRPC, through `opentelemetry-otlp`).
//!
//! A request that is not sampled costs one random draw: no span is built and the caller's
//! `traceparent` goes to the backend as it came. A sampled request collects its spans (the
//! server span, one per policy step, one per upstream try) in the request's own memory and
//! hands them over at its end to a bounded queue; a thread of its own exports them in batches.
//! A full queue or a failing collector drops spans (counted in
//! `turnpike_trace_spans_dropped_total`): traffic never waits for the collector.

use std::borrow::Cow;
use std::cell::Cell;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwapOption;
pub use opentelemetry::trace::SpanKind;
use opentelemetry::trace::{SpanContext, Status, TraceFlags, TraceState};
pub use opentelemetry::KeyValue;
use opentelemetry::{InstrumentationScope, SpanId, TraceId};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter, SpanLinks};
use opentelemetry_sdk::Resource;

use crate::stats::process;

/// Head sampling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sampling {
    /// A request is traced when a 53-bit random number is below this (the ratio × 2^53).
    threshold: u64,
    /// Follow the caller's decision (the `sampled` flag of its `traceparent`).
    pub parent_based: bool,
}

impl Sampling {
    /// Traces `ratio` (0 to 1) of the requests whose caller did not decide, and follows the
    /// caller's decision when `parent_based`.
    pub fn new(ratio: f64, parent_based: bool) -> Sampling {
        Sampling {
            threshold: (ratio.clamp(0.0, 1.0) * (1u64 << 53) as f64) as u64,
            parent_based,
        }
    }
}

/// How spans leave the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP over HTTP with protobuf bodies (`POST {endpoint}/v1/traces`).
    HttpProtobuf,
    /// OTLP over gRPC.
    Grpc,
}

/// Where and how spans are exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportSettings {
    /// The collector's base URL (`http://127.0.0.1:4318` for HTTP, `:4317` for gRPC).
    pub endpoint: String,
    /// The protocol.
    pub protocol: Protocol,
    /// Headers (HTTP) or metadata (gRPC) sent with every export.
    pub headers: Vec<(String, String)>,
    /// `service.name`.
    pub service_name: String,
    /// Further resource attributes.
    pub resource: Vec<(String, String)>,
    /// Spans waiting for export at most; more are dropped.
    pub queue: usize,
    /// Time an export may take.
    pub timeout: Duration,
    /// TLS to an `https://` endpoint.
    pub tls: Option<turnpike_tls::PemTls>,
}

/// A parsed `traceparent`: trace id, parent span id, sampled flag.
pub fn parse_traceparent(v: &[u8]) -> Option<([u8; 16], [u8; 8], bool)> {
    // version "00": 00-<32 hex>-<16 hex>-<2 hex>; later versions may append fields.
    if v.len() < 55 || v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return None;
    }
    if &v[..2] == b"ff" || (&v[..2] == b"00" && v.len() != 55) {
        return None;
    }
    let mut trace = [0u8; 16];
    hex_into(&v[3..35], &mut trace)?;
    let mut span = [0u8; 8];
    hex_into(&v[36..52], &mut span)?;
    let mut flags = [0u8; 1];
    hex_into(&v[53..55], &mut flags)?;
    if trace == [0; 16] || span == [0; 8] {
        return None;
    }
    Some((trace, span, flags[0] & 1 == 1))
}

fn hex_into(src: &[u8], out: &mut [u8]) -> Option<()> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    for (i, pair) in src.chunks(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(())
}

fn hex(bytes: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(D[usize::from(b >> 4)] as char);
        s.push(D[usize::from(b & 15)] as char);
    }
    s
}

thread_local! {
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// A fast per-thread random number (xorshift64*, seeded from the OS): for sampling and ids,
/// not for secrets.
pub fn random() -> u64 {
    RNG.with(|r| {
        let mut x = r.get();
        if x == 0 {
            let mut seed = [0u8; 8];
            let _ = getrandom::fill(&mut seed);
            x = u64::from_le_bytes(seed) | 1;
        }
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        r.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}

fn span_id() -> [u8; 8] {
    loop {
        let id = random().to_be_bytes();
        if id != [0; 8] {
            return id;
        }
    }
}

/// A sampled request's trace: its ids, the spans recorded so far, and where it started.
pub struct Trace {
    trace_id: [u8; 16],
    /// The server span's id.
    span_id: [u8; 8],
    parent: Option<[u8; 8]>,
    state: TraceState,
    start: SystemTime,
    started: Instant,
    children: Vec<SpanData>,
}

/// A child span being timed.
pub struct Timing {
    id: [u8; 8],
    start: SystemTime,
    started: Instant,
}

impl Timing {
    /// The span's id (for the `traceparent` sent with an upstream try).
    pub fn id(&self) -> [u8; 8] {
        self.id
    }
}

impl Trace {
    /// Decides whether a request with these headers is traced; `None` when it is not.
    pub fn begin(
        traceparent: Option<&[u8]>,
        tracestate: Option<&str>,
        s: &Sampling,
    ) -> Option<Trace> {
        let parent = traceparent.and_then(parse_traceparent);
        let sampled = match parent {
            Some((_, _, flag)) if s.parent_based => flag,
            _ => (random() >> 11) < s.threshold,
        };
        if !sampled {
            return None;
        }
        let trace_id = match parent {
            Some((t, _, _)) => t,
            None => {
                let mut t = [0u8; 16];
                t[..8].copy_from_slice(&random().to_be_bytes());
                t[8..].copy_from_slice(&span_id());
                t
            }
        };
        let state = match (parent, tracestate) {
            (Some(_), Some(ts)) => ts.parse().unwrap_or_default(),
            _ => TraceState::default(),
        };
        Some(Trace {
            trace_id,
            span_id: span_id(),
            parent: parent.map(|p| p.1),
            state,
            start: SystemTime::now(),
            started: Instant::now(),
            children: Vec::new(),
        })
    }

    /// The trace id in hex (for exemplars and logs).
    pub fn trace_id(&self) -> String {
        hex(&self.trace_id)
    }

    /// The `traceparent` that names span `span` of this trace as the parent.
    pub fn traceparent(&self, span: [u8; 8]) -> String {
        format!("00-{}-{}-01", hex(&self.trace_id), hex(&span))
    }

    /// The `tracestate` to pass on, if any.
    pub fn tracestate(&self) -> Option<String> {
        let h = self.state.header();
        (!h.is_empty()).then_some(h)
    }

    /// Starts timing a child span.
    pub fn start_child(&self) -> Timing {
        Timing {
            id: span_id(),
            start: SystemTime::now(),
            started: Instant::now(),
        }
    }

    /// Ends a child span of the server span.
    pub fn end_child(
        &mut self,
        t: Timing,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        attributes: Vec<KeyValue>,
        error: Option<String>,
    ) {
        let end = t.start + t.started.elapsed();
        let span = self.span(
            t.id,
            Some(self.span_id),
            false,
            name.into(),
            kind,
            t.start,
            end,
            attributes,
            error,
        );
        self.children.push(span);
    }

    /// A child span timed elsewhere (a policy step), from its start and end instants.
    pub fn add_child(
        &mut self,
        name: impl Into<Cow<'static, str>>,
        from: Instant,
        to: Instant,
        attributes: Vec<KeyValue>,
        error: Option<String>,
    ) {
        let start = self.start + from.saturating_duration_since(self.started);
        let end = self.start + to.saturating_duration_since(self.started);
        let span = self.span(
            span_id(),
            Some(self.span_id),
            false,
            name.into(),
            SpanKind::Internal,
            start,
            end,
            attributes,
            error,
        );
        self.children.push(span);
    }

    #[allow(clippy::too_many_arguments)]
    fn span(
        &self,
        id: [u8; 8],
        parent: Option<[u8; 8]>,
        remote_parent: bool,
        name: Cow<'static, str>,
        kind: SpanKind,
        start: SystemTime,
        end: SystemTime,
        attributes: Vec<KeyValue>,
        error: Option<String>,
    ) -> SpanData {
        SpanData {
            span_context: SpanContext::new(
                TraceId::from_bytes(self.trace_id),
                SpanId::from_bytes(id),
                TraceFlags::SAMPLED,
                false,
                self.state.clone(),
            ),
            parent_span_id: parent.map_or(SpanId::INVALID, SpanId::from_bytes),
            parent_span_is_remote: remote_parent,
            span_kind: kind,
            name,
            start_time: start,
            end_time: end,
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: match error {
                Some(description) => Status::Error {
                    description: description.into(),
                },
                None => Status::Unset,
            },
            instrumentation_scope: scope(),
        }
    }

    /// Ends the server span and hands every span of the request to the exporter.
    pub fn finish(
        mut self,
        name: impl Into<Cow<'static, str>>,
        attributes: Vec<KeyValue>,
        error: Option<String>,
    ) {
        let end = self.start + self.started.elapsed();
        let server = self.span(
            self.span_id,
            self.parent,
            self.parent.is_some(),
            name.into(),
            SpanKind::Server,
            self.start,
            end,
            attributes,
            error,
        );
        let mut spans = std::mem::take(&mut self.children);
        spans.push(server);
        submit(spans);
    }
}

fn scope() -> InstrumentationScope {
    static SCOPE: std::sync::OnceLock<InstrumentationScope> = std::sync::OnceLock::new();
    SCOPE
        .get_or_init(|| {
            InstrumentationScope::builder("turnpike")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build()
        })
        .clone()
}

/// The running exporter's queue (none when tracing is off).
static QUEUE: ArcSwapOption<SyncSender<SpanData>> = ArcSwapOption::const_empty();

/// The running exporter: its settings and thread.
static EXPORTER: Mutex<Option<(ExportSettings, JoinHandle<()>)>> = Mutex::new(None);

fn submit(spans: Vec<SpanData>) {
    let guard = QUEUE.load();
    let Some(queue) = guard.as_ref() else {
        process()
            .spans_dropped
            .fetch_add(spans.len() as u64, std::sync::atomic::Ordering::Relaxed);
        return;
    };
    for s in spans {
        match queue.try_send(s) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                process()
                    .spans_dropped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
}

/// Starts, replaces or (with `None`) stops the exporter, so that it runs with `settings`. The
/// previous exporter sends what it holds before it stops. Returns an error when the exporter
/// cannot be built (the previous one keeps running).
pub fn configure(settings: Option<ExportSettings>) -> Result<(), String> {
    let mut running = EXPORTER.lock().unwrap_or_else(|e| e.into_inner());
    if running.as_ref().map(|(s, _)| s) == settings.as_ref() {
        return Ok(());
    }
    // Swap the queue: new spans go to the new exporter; the old one drains and ends.
    let old = match settings {
        Some(s) => {
            let (tx, rx) = sync_channel(s.queue.max(1));
            let s2 = s.clone();
            let thread = std::thread::Builder::new()
                .name("turnpike-traces".into())
                .spawn(move || export_loop(s2, rx))
                .map_err(|e| format!("cannot start the trace exporter: {e}"))?;
            QUEUE.store(Some(Arc::new(tx)));
            running.replace((s, thread))
        }
        None => {
            QUEUE.store(None);
            running.take()
        }
    };
    drop(running);
    if let Some((_, thread)) = old {
        let _ = thread.join();
    }
    Ok(())
}

fn build_exporter(s: &ExportSettings) -> Result<opentelemetry_otlp::SpanExporter, String> {
    let built = match s.protocol {
        Protocol::HttpProtobuf => {
            let builder = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_endpoint(format!("{}/v1/traces", s.endpoint.trim_end_matches('/')))
                .with_timeout(s.timeout)
                .with_headers(s.headers.iter().cloned().collect());
            match &s.tls {
                None => builder.build(),
                Some(tls) => builder
                    .with_http_client(https_client(tls, s.timeout)?)
                    .build(),
            }
        }
        Protocol::Grpc => {
            let metadata = tonic_metadata(&s.headers)?;
            let builder = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(s.endpoint.clone())
                .with_timeout(s.timeout)
                .with_metadata(metadata);
            match &s.tls {
                None => builder.build(),
                Some(tls) => builder.with_tls_config(grpc_tls(tls)).build(),
            }
        }
    };
    let mut exporter = built.map_err(|e| format!("the trace exporter cannot be built: {e}"))?;
    let resource = Resource::builder()
        .with_service_name(s.service_name.clone())
        .with_attributes(
            s.resource
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        )
        .build();
    exporter.set_resource(&resource);
    Ok(exporter)
}

/// The OTLP/HTTP client for an `https://` collector: hyper with rustls, trusting and presenting
/// what `tls` holds.
fn https_client(
    tls: &turnpike_tls::PemTls,
    timeout: Duration,
) -> Result<impl opentelemetry_http::HttpClient + 'static, String> {
    let config = tls
        .client_config(&[])
        .map_err(|e| format!("TLS to the trace collector: {e}"))?;
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(Arc::unwrap_or_clone(config))
        .https_only();
    let builder = match &tls.server_name {
        Some(name) => {
            let name = rustls_pki_types::ServerName::try_from(name.clone())
                .map_err(|_| format!("`{name}` is not a server name"))?;
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => builder,
    };
    Ok(opentelemetry_http::hyper::HyperClient::new(
        builder.enable_http1().build(),
        timeout,
        None,
    ))
}

/// The gRPC client's TLS for an `https://` collector.
fn grpc_tls(
    tls: &turnpike_tls::PemTls,
) -> opentelemetry_otlp::tonic_types::transport::ClientTlsConfig {
    use opentelemetry_otlp::tonic_types::transport::{Certificate, ClientTlsConfig, Identity};
    let mut config = ClientTlsConfig::new();
    config = match &tls.ca {
        Some(ca) => config.ca_certificate(Certificate::from_pem(ca)),
        None => config.with_native_roots(),
    };
    if let Some((chain, key)) = &tls.identity {
        config = config.identity(Identity::from_pem(chain, key));
    }
    if let Some(name) = &tls.server_name {
        config = config.domain_name(name.clone());
    }
    config
}

fn tonic_metadata(
    headers: &[(String, String)],
) -> Result<opentelemetry_otlp::tonic_types::metadata::MetadataMap, String> {
    let mut map = http::HeaderMap::new();
    for (k, v) in headers {
        let name = http::HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes())
            .map_err(|_| format!("`{k}` is not a gRPC metadata name"))?;
        let value = http::HeaderValue::from_str(v)
            .map_err(|_| format!("the value of `{k}` is not a gRPC metadata value"))?;
        map.insert(name, value);
    }
    Ok(opentelemetry_otlp::tonic_types::metadata::MetadataMap::from_headers(map))
}

/// Batches spans (up to 512, or what arrived within a second) and exports them.
fn export_loop(s: ExportSettings, rx: Receiver<SpanData>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("the trace exporter cannot start: {e}");
            return;
        }
    };
    let exporter = match rt.block_on(async { build_exporter(&s) }) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!("{e}");
            return;
        }
    };
    let mut batch = Vec::with_capacity(512);
    let mut last_error: Option<Instant> = None;
    loop {
        let deadline = Instant::now() + Duration::from_secs(1);
        let mut closed = false;
        while batch.len() < 512 {
            let wait = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(wait) {
                Ok(span) => batch.push(span),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => {
                    closed = true;
                    break;
                }
            }
        }
        if !batch.is_empty() {
            let n = batch.len() as u64;
            let spans = std::mem::take(&mut batch);
            let result = rt.block_on(async {
                tokio::time::timeout(s.timeout + Duration::from_secs(1), exporter.export(spans))
                    .await
            });
            let p = process();
            match result {
                Ok(Ok(())) => {
                    p.spans_exported
                        .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(Err(e)) => {
                    p.spans_dropped
                        .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                    if last_error.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                        tracing::warn!(endpoint = %s.endpoint, "trace export failed, {n} spans dropped: {e}");
                        last_error = Some(Instant::now());
                    }
                }
                Err(_) => {
                    p.spans_dropped
                        .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                    if last_error.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                        tracing::warn!(endpoint = %s.endpoint, "trace export timed out, {n} spans dropped");
                        last_error = Some(Instant::now());
                    }
                }
            }
        }
        if closed {
            let _ = exporter.shutdown();
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent() {
        let t = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let (trace, span, sampled) = parse_traceparent(t).unwrap();
        assert_eq!(hex(&trace), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(hex(&span), "00f067aa0ba902b7");
        assert!(sampled);
        assert!(
            !parse_traceparent(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
                .unwrap()
                .2
        );
        for bad in [
            &b"00-00000000000000000000000000000000-00f067aa0ba902b7-01"[..],
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            b"garbage",
        ] {
            assert!(
                parse_traceparent(bad).is_none(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        // A later version may carry more fields.
        assert!(
            parse_traceparent(b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz")
                .is_some()
        );
    }

    #[test]
    fn sampling() {
        let never = Sampling::new(0.0, true);
        let always = Sampling::new(1.0, true);
        assert!(Trace::begin(None, None, &never).is_none());
        assert!(Trace::begin(None, None, &always).is_some());
        let sampled_parent = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let t = Trace::begin(Some(sampled_parent), Some("vendor=x"), &never).unwrap();
        assert_eq!(t.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.tracestate().as_deref(), Some("vendor=x"));
        assert!(t
            .traceparent(t.span_id)
            .starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"));
        let unsampled_parent = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        assert!(Trace::begin(Some(unsampled_parent), None, &always).is_none());
        let ignore_parent = Sampling::new(1.0, false);
        assert!(Trace::begin(Some(unsampled_parent), None, &ignore_parent).is_some());
        let tenth = Sampling::new(0.1, true);
        let n = (0..20_000)
            .filter(|_| Trace::begin(None, None, &tenth).is_some())
            .count();
        assert!((1_600..2_400).contains(&n), "{n} of 20000 at 10%");
    }
}
