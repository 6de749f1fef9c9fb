//! The admin API's routes: documents (`/admin/v1/{apis,upstreams,consumers}[/{name}]`,
//! `/admin/v1/globals`), `validate`, `reload`, `config`, `status`, the API's own OpenAPI
//! document, and the orchestrator probes `/healthz` and `/readyz`. Every error is a
//! problem+json body from the gateway's catalogue.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use serde_json::{json, Value};
use turnpike_core::problem::{types, Problem};

use crate::document;
use crate::manager::{ChangeError, Entry};
use crate::store::Kind;
use crate::Admin;

/// The largest request body the admin API reads.
pub const MAX_BODY: usize = 4 << 20;

/// The API's OpenAPI 3.1 description.
pub const OPENAPI: &str = include_str!("openapi.json");

type Answer = Response<Full<Bytes>>;

/// Answers one admin request.
pub async fn handle<B>(admin: Arc<Admin>, req: Request<B>) -> Answer
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    // The probes answer without a token: they tell nothing but whether the process serves.
    match (&parts.method, path.as_str()) {
        (&Method::GET, "/healthz") => {
            return json_answer(StatusCode::OK, &json!({"status": "alive"}))
        }
        (&Method::GET, "/readyz") => {
            return if admin.draining.load(Ordering::Relaxed) {
                json_answer(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &json!({"status": "draining"}),
                )
            } else {
                json_answer(StatusCode::OK, &json!({"status": "ready"}))
            };
        }
        _ => {}
    }
    if path.starts_with("/console/") && parts.method == Method::GET {
        // The console's script and style sheet: nothing secret, and the login page uses them.
        if let Some(a) = crate::console::asset(&path) {
            return a;
        }
    }
    if !admin.authorized(&parts.method, &parts.headers) {
        if path == "/console" || path == "/console/" {
            return crate::console::login();
        }
        return problem(
            Problem::new(&types::UNAUTHORIZED)
                .with_detail("send the admin token as `Authorization: Bearer <token>`")
                .with_header(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"turnpike-admin\""),
                ),
        );
    }
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return problem(
                Problem::new(&types::BODY_TOO_LARGE)
                    .with_detail(format!("the admin API reads bodies up to {MAX_BODY} bytes")),
            )
        }
    };
    let yaml = wants_yaml(&parts.headers);
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    match segments.as_slice() {
        ["admin", "v1", "status"] => only(&parts.method, &[Method::GET], || status(&admin)),
        ["metrics"] => only(&parts.method, &[Method::GET], || {
            metrics(&admin, &parts.headers)
        }),
        ["console"] => only(&parts.method, &[Method::GET], crate::console::page),
        ["admin", "v1", "stats"] => only(&parts.method, &[Method::GET], || stats(&admin)),
        ["admin", "v1", "exchanges"] => only(&parts.method, &[Method::GET], || {
            let store = admin.manager.gateway().snapshot().settings.exchange_store;
            exchanges(parts.uri.query().unwrap_or(""), store.map(|(size, _)| size))
        }),
        ["admin", "v1", "exchanges", id] => only(&parts.method, &[Method::GET], || exchange(id)),
        ["admin", "v1", "openapi.json"] => only(&parts.method, &[Method::GET], || {
            let mut r = Response::new(Full::new(Bytes::from_static(OPENAPI.as_bytes())));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        }),
        ["admin", "v1", "config"] => only(&parts.method, &[Method::GET], || {
            let docs: Vec<Value> = admin
                .manager
                .config()
                .into_iter()
                .map(|(kind, location, json)| {
                    json!({"kind": kind, "location": location, "document": document::redact(&json)})
                })
                .collect();
            let (revision, _) = admin.manager.revision();
            render(
                StatusCode::OK,
                &json!({"revision": revision, "documents": docs}),
                yaml,
            )
        }),
        ["admin", "v1", "reload"] => {
            if parts.method != Method::POST {
                return not_allowed(&[Method::POST]);
            }
            let m = Arc::clone(&admin.manager);
            match blocking(move || m.reload("admin")).await {
                Ok(Ok(revision)) => json_answer(StatusCode::OK, &json!({"revision": revision})),
                Ok(Err(errors)) => problem(
                    Problem::new(&types::INVALID_DOCUMENT)
                        .with_detail(
                            "the configuration files have errors; the running configuration stays",
                        )
                        .with_member("errors", json!(errors)),
                ),
                Err(p) => problem(p),
            }
        }
        ["admin", "v1", "validate"] => {
            if parts.method != Method::POST {
                return not_allowed(&[Method::POST]);
            }
            let text = match body_text(&parts.headers, &body) {
                Ok(t) => t,
                Err(p) => return problem(p),
            };
            let m = Arc::clone(&admin.manager);
            match blocking(move || m.validate(&text)).await {
                Ok(Ok(diff)) => render(StatusCode::OK, &json!({"valid": true, "diff": diff}), yaml),
                Ok(Err(e)) => change_problem(e),
                Err(p) => problem(p),
            }
        }
        ["admin", "v1", "globals"] => {
            document_route(&admin, &parts, body, Kind::Globals, Kind::GLOBALS, yaml).await
        }
        ["admin", "v1", collection] => match Kind::from_collection(collection) {
            Some(kind) if kind != Kind::Globals => {
                only(&parts.method, &[Method::GET], || list(&admin, kind, yaml))
            }
            _ => problem(Problem::no_route().with_detail("no such admin resource")),
        },
        ["admin", "v1", collection, name] => match Kind::from_collection(collection) {
            Some(kind) if kind != Kind::Globals => {
                let name = percent_decode(name);
                document_route(&admin, &parts, body, kind, &name, yaml).await
            }
            _ => problem(Problem::no_route().with_detail("no such admin resource")),
        },
        _ => problem(Problem::no_route().with_detail("no such admin resource")),
    }
}

async fn document_route(
    admin: &Arc<Admin>,
    parts: &http::request::Parts,
    body: Bytes,
    kind: Kind,
    name: &str,
    yaml: bool,
) -> Answer {
    let allow = [Method::GET, Method::PUT, Method::DELETE];
    match parts.method {
        Method::GET | Method::HEAD => {
            let found: Vec<Entry> = admin
                .manager
                .entries(kind)
                .into_iter()
                .filter(|e| e.name == name)
                .collect();
            match found.as_slice() {
                [] => problem(
                    Problem::no_route()
                        .with_detail(format!("no document `{}/{name}`", kind.collection())),
                ),
                [e] => {
                    let mut r = render(StatusCode::OK, &document::redact(&e.json), yaml);
                    if let Ok(v) = HeaderValue::from_str(&e.etag) {
                        r.headers_mut().insert(header::ETAG, v);
                    }
                    r
                }
                many => problem(
                    Problem::new(&types::CONFLICT)
                        .with_detail(format!(
                            "`{}/{name}` is defined more than once",
                            kind.collection()
                        ))
                        .with_member(
                            "locations",
                            json!(many.iter().map(|e| &e.location).collect::<Vec<_>>()),
                        ),
                ),
            }
        }
        Method::PUT => {
            let text = match body_text(&parts.headers, &body) {
                Ok(t) => t,
                Err(p) => return problem(p),
            };
            let if_match = header_str(&parts.headers, header::IF_MATCH);
            let if_none = header_str(&parts.headers, header::IF_NONE_MATCH);
            let m = Arc::clone(&admin.manager);
            let name = name.to_owned();
            let done = blocking(move || {
                m.put(kind, &name, &text, if_match.as_deref(), if_none.as_deref())
            })
            .await;
            match done {
                Ok(Ok(applied)) => {
                    let status = if applied.created {
                        StatusCode::CREATED
                    } else {
                        StatusCode::OK
                    };
                    let mut r = json_answer(status, &json!({"revision": applied.revision}));
                    if let Some(v) = applied.etag.and_then(|t| HeaderValue::from_str(&t).ok()) {
                        r.headers_mut().insert(header::ETAG, v);
                    }
                    r
                }
                Ok(Err(e)) => change_problem(e),
                Err(p) => problem(p),
            }
        }
        Method::DELETE => {
            let if_match = header_str(&parts.headers, header::IF_MATCH);
            let m = Arc::clone(&admin.manager);
            let owned = name.to_owned();
            match blocking(move || m.delete(kind, &owned, if_match.as_deref())).await {
                Ok(Ok(_)) => {
                    let mut r = Response::new(Full::new(Bytes::new()));
                    *r.status_mut() = StatusCode::NO_CONTENT;
                    r
                }
                Ok(Err(ChangeError::NotFound)) => problem(
                    Problem::no_route()
                        .with_detail(format!("no stored document `{}/{name}`", kind.collection())),
                ),
                Ok(Err(e)) => change_problem(e),
                Err(p) => problem(p),
            }
        }
        _ => not_allowed(&allow),
    }
}

fn list(admin: &Admin, kind: Kind, yaml: bool) -> Answer {
    let items: Vec<Value> = admin
        .manager
        .entries(kind)
        .into_iter()
        .map(|e| {
            json!({
                "name": e.name,
                "source": e.source,
                "location": e.location,
                "etag": e.etag,
                "document": document::redact(&e.json),
            })
        })
        .collect();
    render(
        StatusCode::OK,
        &json!({"count": items.len(), "items": items}),
        yaml,
    )
}

fn status(admin: &Admin) -> Answer {
    let (revision, last) = admin.manager.revision();
    let gw = admin.manager.gateway();
    let listeners: Vec<Value> = gw
        .listeners()
        .into_iter()
        .map(|(configured, bound)| json!({"configured": configured.to_string(), "bound": bound.to_string()}))
        .collect();
    let store = match admin.manager.store() {
        None => Value::Null,
        Some(s) => json!({"kind": admin.store_kind(), "dir": s.root().display().to_string()}),
    };
    // Upstreams with a concurrency limit: where it stands and what waits for it.
    let concurrency: Vec<Value> = gw
        .snapshot()
        .upstreams
        .iter()
        .filter_map(|u| u.admission.as_ref().map(|a| (u, a)))
        .map(|(u, a)| {
            let now = a.now();
            let shed: serde_json::Map<String, Value> = turnpike_snapshot::admission::Shed::ALL
                .iter()
                .map(|w| (w.label().to_owned(), json!(a.stats.shed_count(*w))))
                .collect();
            json!({
                "upstream": &*u.name,
                "limit": now.limit,
                "inFlight": now.in_flight,
                "queued": now.queued,
                "queuedKeys": now.keys,
                "shed": shed,
            })
        })
        .collect();
    let mut body = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "uptimeSeconds": admin.manager.uptime().as_secs(),
        "revision": revision,
        "lastReload": last,
        "workers": gw.threads(),
        "listeners": listeners,
        "store": store,
        "draining": admin.draining.load(Ordering::Relaxed),
        "concurrency": concurrency,
    });
    if let Some(extra) = admin.status_extra() {
        body["fleet"] = extra;
    }
    json_answer(StatusCode::OK, &body)
}

/// The console's live figures: revision, last reload, per-API rates and latency, node health.
fn stats(admin: &Admin) -> Answer {
    let (revision, last) = admin.manager.revision();
    let snap = admin.manager.gateway().snapshot();
    let now = turnpike_snapshot::upstream::now_ms();
    let upstreams: Vec<Value> = snap
        .upstreams
        .iter()
        .map(|u| {
            let nodes: Vec<Value> = u
                .nodes
                .iter()
                .map(|n| json!({"node": &*n.label, "healthy": n.state.usable(now)}))
                .collect();
            json!({"name": &*u.name, "nodes": nodes})
        })
        .collect();
    json_answer(
        StatusCode::OK,
        &json!({
            "revision": revision,
            "uptimeSeconds": admin.manager.uptime().as_secs(),
            "lastReload": last,
            "apis": admin.live.apis(),
            "upstreams": upstreams,
        }),
    )
}

fn summary(r: &turnpike_engine::exchanges::Record) -> Value {
    json!({
        "id": r.id,
        "time": r.time_ms,
        "api": r.api.as_deref(),
        "method": r.method,
        "uri": r.uri,
        "status": r.status,
        "durationMs": r.duration_us as f64 / 1000.0,
        "node": r.node.as_deref(),
        "client": r.client.to_string(),
    })
}

/// The one line that turns the store of recent exchanges on, for answers while it is off.
const STORE_OFF: &str = "The store of recent exchanges is off. Turn it on with a `telemetry:` document: `telemetry: { exchangeStore: { size: 1000 } }`";

/// `?api=NAME&status=4xx|404&limit=N`: the recent exchanges, newest first; `size` is the
/// store's size, `None` while it is off (the answer then says how to turn it on).
fn exchanges(query: &str, size: Option<usize>) -> Answer {
    let mut api = None;
    let mut status = None;
    let mut limit = 100usize;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = percent_decode(v);
        match k {
            "api" if !v.is_empty() => api = Some(v),
            "status" if !v.is_empty() => status = Some(v),
            "limit" => limit = v.parse().unwrap_or(100).clamp(1, 100_000),
            _ => {}
        }
    }
    let status_ok = |s: u16| match status.as_deref() {
        None => true,
        Some(f) if f.len() == 3 && f.ends_with("xx") => {
            u16::from(f.as_bytes()[0].wrapping_sub(b'0')) == s / 100
        }
        Some(f) => f.parse::<u16>().is_ok_and(|code| code == s),
    };
    let items: Vec<Value> = turnpike_engine::exchanges::recent(limit, |r| {
        api.as_deref().is_none_or(|a| r.api.as_deref() == Some(a)) && status_ok(r.status)
    })
    .iter()
    .map(|r| summary(r))
    .collect();
    let mut body = json!({"count": items.len(), "items": items, "enabled": size.is_some()});
    match size {
        Some(n) => body["size"] = json!(n),
        None => body["hint"] = json!(STORE_OFF),
    }
    json_answer(StatusCode::OK, &body)
}

/// One exchange with its headers and the start of its bodies.
fn exchange(id: &str) -> Answer {
    let Some(r) = turnpike_engine::exchanges::find(&percent_decode(id)) else {
        return problem(
            Problem::no_route().with_detail("no such exchange (it may have left the store)"),
        );
    };
    let (req_body, req_cut) = r.request_body.get();
    let (res_body, res_cut) = r.response_body.get();
    let mut v = summary(&r);
    v["requestHeaders"] = json!(r.request_headers);
    v["responseHeaders"] = json!(r.response_headers);
    v["requestBody"] = json!(String::from_utf8_lossy(&req_body));
    v["requestBodyTruncated"] = json!(req_cut);
    v["responseBody"] = json!(String::from_utf8_lossy(&res_body));
    v["responseBodyTruncated"] = json!(res_cut);
    v["error"] = json!(r.error);
    json_answer(StatusCode::OK, &v)
}

/// Prometheus metrics (OpenMetrics when the `Accept` header asks for it).
fn metrics(admin: &Admin, headers: &HeaderMap) -> Answer {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let open = turnpike_telemetry::metrics::wants_openmetrics(accept);
    let snap = admin.manager.gateway().snapshot();
    let now = turnpike_snapshot::upstream::now_ms();
    let health: Vec<(Arc<str>, Arc<str>, bool)> = snap
        .upstreams
        .iter()
        .flat_map(|u| {
            u.nodes.iter().map(|n| {
                (
                    Arc::clone(&u.name),
                    Arc::clone(&n.label),
                    n.state.usable(now),
                )
            })
        })
        .collect();
    let queues: Vec<_> = snap
        .upstreams
        .iter()
        .filter_map(|u| u.admission.as_ref().map(|a| (u, a)))
        .map(|(u, a)| {
            let now = a.now();
            turnpike_telemetry::metrics::QueueSeries {
                upstream: Arc::clone(&u.name),
                limit: i64::from(now.limit),
                in_flight: i64::from(now.in_flight),
                queued: now.queued as i64,
                shed: turnpike_snapshot::admission::Shed::ALL
                    .iter()
                    .map(|w| (w.label(), a.stats.shed_count(*w)))
                    .collect(),
                wait: a.stats.waits(),
            }
        })
        .collect();
    let body = turnpike_telemetry::metrics::render(open, &health, &queues);
    let mut r = Response::new(Full::new(Bytes::from(body)));
    let ct = if open {
        turnpike_telemetry::metrics::OPENMETRICS_TEXT
    } else {
        turnpike_telemetry::metrics::PROMETHEUS_TEXT
    };
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    r
}

/// Runs `f` off the admin runtime's thread (compiling a configuration takes a while).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Problem> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        tracing::error!("admin request failed: {e}");
        Problem::new(&types::INTERNAL)
    })
}

fn change_problem(e: ChangeError) -> Answer {
    let p = match e {
        ChangeError::Invalid(errors) => Problem::new(&types::INVALID_DOCUMENT)
            .with_detail(format!("{} error(s); nothing changed", errors.len()))
            .with_member("errors", json!(errors)),
        ChangeError::ReadOnly(..) => Problem::new(&types::READ_ONLY)
            .with_detail(e.to_string())
            .with_header(header::ALLOW, HeaderValue::from_static("GET")),
        ChangeError::Conflict(..) => Problem::new(&types::CONFLICT).with_detail(e.to_string()),
        ChangeError::NoStore => Problem::new(&types::READ_ONLY)
            .with_detail(e.to_string())
            .with_header(header::ALLOW, HeaderValue::from_static("GET")),
        ChangeError::NotFound => Problem::no_route().with_detail("no such document"),
        ChangeError::Stale(_) => {
            Problem::new(&types::PRECONDITION_FAILED).with_detail(e.to_string())
        }
        ChangeError::Apply(msg) => {
            tracing::warn!("admin change not applied: {msg}");
            Problem::new(&types::CONFLICT)
                .with_detail("the configuration is valid but cannot be applied (a listening address cannot be opened); nothing changed")
        }
        ChangeError::Pending(revision) => {
            let mut r = json_answer(
                StatusCode::ACCEPTED,
                &json!({"etcdRevision": revision, "applied": false}),
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return r;
        }
        ChangeError::Store(msg) => {
            tracing::error!("admin store failed: {msg}");
            Problem::new(&types::STORE_UNAVAILABLE)
                .with_detail("the change was not stored; nothing changed")
        }
    };
    problem(p)
}

fn only(method: &Method, allowed: &[Method], f: impl FnOnce() -> Answer) -> Answer {
    if allowed.contains(method) || (method == Method::HEAD && allowed.contains(&Method::GET)) {
        f()
    } else {
        not_allowed(allowed)
    }
}

fn not_allowed(allowed: &[Method]) -> Answer {
    let list: Vec<&str> = allowed.iter().map(Method::as_str).collect();
    let allow = HeaderValue::from_str(&list.join(", ")).unwrap_or(HeaderValue::from_static("GET"));
    problem(Problem::new(&types::METHOD_NOT_ALLOWED).with_header(header::ALLOW, allow))
}

/// The request body as text, if its media type is one the API reads (JSON or YAML).
fn body_text(headers: &HeaderMap, body: &Bytes) -> Result<String, Problem> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
    let ok = match ct.as_deref() {
        None => true,
        Some(t) => t == "application/json" || t.ends_with("+json") || t.ends_with("yaml"),
    };
    if !ok {
        return Err(Problem::new(&types::UNSUPPORTED_MEDIA_TYPE)
            .with_detail("send `application/json` or `application/yaml`"));
    }
    String::from_utf8(body.to_vec())
        .map_err(|_| Problem::new(&types::BAD_REQUEST).with_detail("the body is not UTF-8 text"))
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn wants_yaml(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("yaml"))
}

fn render(status: StatusCode, v: &Value, yaml: bool) -> Answer {
    if yaml {
        let mut r = Response::new(Full::new(Bytes::from(document::to_yaml(v))));
        *r.status_mut() = status;
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/yaml"),
        );
        r
    } else {
        json_answer(status, v)
    }
}

fn json_answer(status: StatusCode, v: &Value) -> Answer {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// A problem as an admin API answer.
pub fn problem(p: Problem) -> Answer {
    let mut r = Response::new(Full::new(Bytes::from(p.to_json().to_string())));
    *r.status_mut() = p.status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    for (k, v) in p.headers {
        r.headers_mut().insert(k, v);
    }
    r
}

fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}
