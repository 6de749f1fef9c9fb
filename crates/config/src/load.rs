//! Loads configuration files and folders (with `include:`), checks every document against the
//! model, and keeps each document's origin so that later (compile-time) errors can point at the
//! file, line, column and key too.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use turnpike_core::settings::parse_recovering;
use turnpike_core::CompileError;

use crate::components::{is_components, Components};
use crate::error::{ConfigError, ConfigErrors, Location};
use crate::model::{
    AdminConfig, ApiConfig, ConsumerConfig, Document, GatewaySettings, PolicyConfig,
    SoapProxyConfig, TelemetryConfig, UpstreamConfig,
};
use crate::yaml::{self, Span};

/// Where one YAML document came from, with the position of each of its values.
#[derive(Debug)]
pub struct Origin {
    /// The file.
    pub file: PathBuf,
    /// Index of the document in the file (0-based).
    pub document: usize,
    /// The document as read (environment references replaced), for comparing two loads.
    pub raw: serde_json::Value,
    spans: HashMap<String, Span>,
    /// The document had errors and is what is left once they were taken out: checks that
    /// would only repeat them (a missing `target:` that was misspelt) stay quiet.
    pub recovered: bool,
}

impl Origin {
    /// The location of the value at `key` (e.g. `api.flow[0].return.status`); when that exact key
    /// has no recorded position, the nearest enclosing value's.
    pub fn at(&self, key: &str) -> Location {
        let mut probe = key;
        let span = loop {
            if let Some(s) = self.spans.get(probe) {
                break *s;
            }
            match probe.rfind(['.', '[']) {
                Some(i) => probe = &probe[..i],
                None => break self.spans.get("").copied().unwrap_or_default(),
            }
        };
        Location {
            file: self.file.clone(),
            line: span.line,
            column: span.column,
            key: key.to_owned(),
        }
    }

    /// The location of the key itself (not its value), for errors about the key.
    pub fn key_at(&self, key: &str) -> Location {
        match self.spans.get(&format!("{key}#key")) {
            Some(span) => Location {
                file: self.file.clone(),
                line: span.line,
                column: span.column,
                key: key.to_owned(),
            },
            None => self.at(key),
        }
    }

    /// An error about the value at `key`.
    pub fn error(&self, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::new(self.at(key), message)
    }
}

/// A value of the config together with where it came from and its key path in that document.
#[derive(Debug, Clone)]
pub struct Located<T> {
    /// The value.
    pub value: T,
    /// The document it was read from.
    pub origin: Arc<Origin>,
    /// Its key path in the document (e.g. `api`).
    pub key: String,
}

impl<T> Located<T> {
    /// An error about `sub` (a key path below this value, such as `target.url`; empty for the
    /// value itself).
    pub fn error(&self, sub: &str, message: impl Into<String>) -> ConfigError {
        if sub.is_empty() {
            ConfigError::new(self.origin.key_at(&self.key), message)
        } else {
            self.origin.error(&self.join(sub), message)
        }
    }

    /// An error about the key `sub` itself (an unknown or misplaced name), pointing at the key
    /// rather than its value.
    pub fn error_at_key(&self, sub: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::new(self.origin.key_at(&self.join(sub)), message)
    }

    /// The full key path of `sub` below this value.
    pub fn join(&self, sub: &str) -> String {
        if sub.is_empty() {
            self.key.clone()
        } else if sub.starts_with('[') {
            format!("{}{sub}", self.key)
        } else {
            format!("{}.{sub}", self.key)
        }
    }
}

/// Everything a configuration consists of, in file order.
#[derive(Debug, Clone, Default)]
pub struct ConfigSet {
    /// Process-level settings (defaults when no `gateway:` document was given).
    pub gateway: GatewaySettings,
    /// Where the `gateway:` document came from, if there was one.
    pub gateway_origin: Option<Arc<Origin>>,
    /// Every API, in the order read.
    pub apis: Vec<Located<ApiConfig>>,
    /// Every `internal:` API, in the order read.
    pub internals: Vec<Located<crate::InternalConfig>>,
    /// Every `proxy:` (forward proxy), in the order read.
    pub proxies: Vec<Located<crate::ProxyConfig>>,
    /// Every `soapProxy:` document, in the order read.
    pub soap_proxies: Vec<Located<SoapProxyConfig>>,
    /// Membrane's `configuration:` document, if there was one.
    pub configuration: Option<Located<crate::MembraneConfiguration>>,
    /// Every `sslProxy:` document (TLS passthrough), in the order read.
    pub ssl_proxies: Vec<Located<crate::SslProxyConfig>>,
    /// Every `global:` list, in the order read.
    pub globals: Vec<Located<Vec<PolicyConfig>>>,
    /// Every consumer, in the order read.
    pub consumers: Vec<Located<ConsumerConfig>>,
    /// Every `upstream:` document, in the order read.
    pub upstreams: Vec<Located<UpstreamConfig>>,
    /// The `admin:` document, if there was one.
    pub admin: Option<Located<AdminConfig>>,
    /// The `telemetry:` document, if there was one.
    pub telemetry: Option<Located<TelemetryConfig>>,
    /// Every file read (for `--watch`).
    pub files: Vec<PathBuf>,
}

/// Changes to files that a load sees instead of what is on disk: a path mapped to new text
/// (a new file appears in its folder's listing), or to `None` (the file is gone). The admin API
/// checks a change this way before it writes it.
pub type Overlay = BTreeMap<PathBuf, Option<String>>;

/// Loads `paths` (files, or folders whose `*.yaml`/`*.yml` files are read in name order),
/// replacing `${NAME}` from the process environment. Returns every error found.
pub fn load(paths: &[PathBuf]) -> Result<ConfigSet, ConfigErrors> {
    load_with_env(paths, &|name| std::env::var(name).ok())
}

/// [`load`] with an explicit environment lookup (for tests).
pub fn load_with_env(
    paths: &[PathBuf],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ConfigSet, ConfigErrors> {
    let (set, errors) = load_lenient(paths, env);
    errors.into_result(set)
}

/// Loads what can be loaded, and every error found: used to report all problems at once. A
/// document with errors is in the set as far as it parses (its unknown keys and values of the
/// wrong type taken out), or left out when it does not; never serve a set that came with
/// errors.
pub fn load_lenient(
    paths: &[PathBuf],
    env: &dyn Fn(&str) -> Option<String>,
) -> (ConfigSet, ConfigErrors) {
    load_lenient_with(paths, &Overlay::new(), env)
}

/// [`load_lenient`] as if the files of `overlay` held its texts.
pub fn load_lenient_with(
    paths: &[PathBuf],
    overlay: &Overlay,
    env: &dyn Fn(&str) -> Option<String>,
) -> (ConfigSet, ConfigErrors) {
    let mut loader = Loader {
        env,
        overlay,
        set: ConfigSet::default(),
        errors: ConfigErrors::default(),
        seen: HashSet::new(),
    };
    for p in paths {
        loader.load_path(p, None);
    }
    if loader.set.files.is_empty() && loader.errors.is_empty() {
        loader.errors.push(ConfigError::new(
            Location {
                file: paths.first().cloned().unwrap_or_default(),
                line: 0,
                column: 0,
                key: String::new(),
            },
            "no configuration file found",
        ));
    }
    (loader.set, loader.errors)
}

/// Loads configuration from YAML text (for tests and embedding); `name` is used in errors.
pub fn load_str(
    name: &str,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ConfigSet, ConfigErrors> {
    let overlay = Overlay::new();
    let mut loader = Loader {
        env,
        overlay: &overlay,
        set: ConfigSet::default(),
        errors: ConfigErrors::default(),
        seen: HashSet::new(),
    };
    loader.load_text(Path::new(name), text);
    loader.errors.into_result(loader.set)
}

struct Loader<'e> {
    env: &'e dyn Fn(&str) -> Option<String>,
    overlay: &'e Overlay,
    set: ConfigSet,
    errors: ConfigErrors,
    seen: HashSet<PathBuf>,
}

impl Loader<'_> {
    fn load_path(&mut self, path: &Path, from: Option<Location>) {
        let fail = |msg: String| {
            ConfigError::new(
                from.clone().unwrap_or(Location {
                    file: path.to_owned(),
                    line: 0,
                    column: 0,
                    key: String::new(),
                }),
                msg,
            )
        };
        if let Some(text) = self.overlay.get(path) {
            match text {
                Some(text) => {
                    if self.seen.insert(path.to_owned()) {
                        self.load_text(path, text);
                    }
                }
                None => self
                    .errors
                    .push(fail(format!("cannot read {}: removed", path.display()))),
            }
            return;
        }
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) => {
                let err = fail(format!("cannot read {}: {e}", path.display()));
                self.errors.push(err);
                return;
            }
        };
        if meta.is_dir() {
            let mut files: Vec<PathBuf> = match std::fs::read_dir(path) {
                Ok(rd) => rd
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.is_file() && is_yaml(p))
                    .collect(),
                Err(e) => {
                    let err = fail(format!("cannot list {}: {e}", path.display()));
                    self.errors.push(err);
                    return;
                }
            };
            // The overlay's changes to this folder: new files appear, removed ones go.
            for (p, text) in self.overlay {
                if p.parent() == Some(path) && is_yaml(p) {
                    match text {
                        Some(_) if !files.contains(p) => files.push(p.clone()),
                        None => files.retain(|f| f != p),
                        Some(_) => {}
                    }
                }
            }
            // As Membrane: a folder with `*.apis.yaml` files is read for those only (specs and
            // other YAML files may sit beside them).
            if files.iter().any(|f| is_apis_yaml(f)) {
                files.retain(|f| is_apis_yaml(f));
            }
            files.sort();
            for f in files {
                self.load_path(&f, from.clone());
            }
            return;
        }
        let canonical = path.canonicalize().unwrap_or_else(|_| path.to_owned());
        if !self.seen.insert(canonical) {
            if from.is_some() {
                let err = fail(format!("{} is included more than once", path.display()));
                self.errors.push(err);
            }
            return;
        }
        match std::fs::read_to_string(path) {
            Ok(text) => self.load_text(path, &text),
            Err(e) => {
                let err = fail(format!("cannot read {}: {e}", path.display()));
                self.errors.push(err);
            }
        }
    }

    fn load_text(&mut self, path: &Path, text: &str) {
        self.set.files.push(path.to_owned());
        let docs = match yaml::parse_documents(text, self.env) {
            Ok(d) => d,
            Err(errs) => {
                for e in errs {
                    self.errors.push(at_span(path, e.span, e.key, e.message));
                }
                return;
            }
        };
        // Membrane's `components:` and their `$ref`s, resolved within the file.
        let mut docs = docs;
        let mut components = Components::default();
        let mut ref_errors = Vec::new();
        for node in &docs {
            if is_components(node) {
                components.add(node, &mut ref_errors);
            }
        }
        for node in docs.iter_mut() {
            if !is_components(node) {
                components.resolve(node, "", &mut ref_errors);
            }
        }
        for e in ref_errors {
            self.errors.push(at_span(path, e.span, e.key, e.message));
        }
        for (index, node) in docs.iter().enumerate() {
            if node.value == yaml::Value::Null || is_components(node) {
                continue; // an empty document, or components (resolved above)
            }
            let mut spans = HashMap::new();
            let json = yaml::to_json(node, &mut String::new(), &mut spans);
            let mut origin = Origin {
                file: path.to_owned(),
                document: index,
                raw: json.clone(),
                spans,
                recovered: false,
            };
            // A document with errors is still added as far as it parses (its bad keys and
            // values taken out), so that compiling it reports its other errors in the same run;
            // the load fails on the errors found here.
            let (doc, errors) = parse_recovering::<Document>(json);
            origin.recovered = !errors.is_empty();
            for e in errors {
                self.errors.push(model_error(&origin, e));
            }
            if let Some(doc) = doc {
                self.add(doc, Arc::new(origin));
            }
        }
    }

    fn add(&mut self, doc: Document, origin: Arc<Origin>) {
        match doc {
            Document::Api(mut api) => {
                let specs = std::mem::take(&mut api.specs);
                api.openapi.extend(specs.into_iter().map(|s| s.openapi));
                self.set.apis.push(Located {
                    value: *api,
                    origin,
                    key: "api".into(),
                });
            }
            Document::Proxy(p) => self.set.proxies.push(Located {
                value: *p,
                origin,
                key: "proxy".into(),
            }),
            Document::SslProxy(p) => self.set.ssl_proxies.push(Located {
                value: *p,
                origin,
                key: "sslProxy".into(),
            }),
            Document::Internal(i) => self.set.internals.push(Located {
                value: *i,
                origin,
                key: "internal".into(),
            }),
            Document::Consumer(c) => self.set.consumers.push(Located {
                value: c,
                origin,
                key: "consumer".into(),
            }),
            Document::Upstream(u) => self.set.upstreams.push(Located {
                value: *u,
                origin,
                key: "upstream".into(),
            }),
            Document::SoapProxy(p) => self.set.soap_proxies.push(Located {
                value: *p,
                origin,
                key: "soapProxy".into(),
            }),
            Document::Global(policies) => self.set.globals.push(Located {
                value: policies,
                origin,
                key: "global".into(),
            }),
            Document::Gateway(g) => {
                if let Some(first) = &self.set.gateway_origin {
                    self.errors.push(origin.error(
                        "gateway",
                        format!(
                            "a second `gateway:` document (the first is at {})",
                            first.at("gateway")
                        ),
                    ));
                } else {
                    self.set.gateway = *g;
                    self.set.gateway_origin = Some(origin);
                }
            }
            Document::Configuration(c) => {
                if let Some(first) = &self.set.configuration {
                    self.errors.push(origin.error(
                        "configuration",
                        format!(
                            "a second `configuration:` document (the first is at {})",
                            first.origin.at("configuration")
                        ),
                    ));
                } else {
                    if c.production == Some(false) {
                        self.errors.push(origin.error(
                            "configuration.production",
                            "Turnpike's error bodies never show internals (details go to the log with the request id): leave `production` out or `true`",
                        ));
                    }
                    let mut refuse = |key: &str, instead: &str| {
                        self.errors.push(origin.error(
                            &format!("configuration.{key}"),
                            format!("Membrane's `{key}` is not supported: {instead} (see docs/membrane.md)"),
                        ))
                    };
                    if c.jmx_router_name.is_some() {
                        refuse("jmxRouterName", "JMX is not available: metrics are at `/metrics` (Prometheus), state in the admin API");
                    }
                    if c.uri_factory.is_some() {
                        refuse("uriFactory", "request URIs are parsed strictly (RFC 3986; illegal characters are a 400), with nothing to configure");
                    }
                    if let Some(h) = &c.http_client_config {
                        if h.adjust_host_header.is_some() {
                            refuse(
                                "httpClientConfig.adjustHostHeader",
                                "set it per API as `target.adjustHostHeader`",
                            );
                        }
                        if h.use_experimental_http2.is_some() {
                            refuse("httpClientConfig.useExperimentalHttp2", "HTTP/2 to a backend is set per API (`target.http2`, or `h2` negotiated over TLS)");
                        }
                        if h.connection.is_some() {
                            refuse(
                                "httpClientConfig.connection",
                                "use `gateway.timeouts` (`connect`, `upstream`, `upstreamIdle`)",
                            );
                        }
                        if h.max_retries.is_some() {
                            refuse(
                                "httpClientConfig.maxRetries",
                                "retries are set per upstream (`upstream.retries`)",
                            );
                        }
                    }
                    self.set.configuration = Some(Located {
                        value: *c,
                        origin,
                        key: "configuration".into(),
                    });
                }
            }
            Document::Admin(a) => {
                if let Some(first) = &self.set.admin {
                    self.errors.push(origin.error(
                        "admin",
                        format!(
                            "a second `admin:` document (the first is at {})",
                            first.origin.at("admin")
                        ),
                    ));
                } else {
                    self.set.admin = Some(Located {
                        value: *a,
                        origin,
                        key: "admin".into(),
                    });
                }
            }
            Document::Telemetry(t) => {
                if let Some(first) = &self.set.telemetry {
                    self.errors.push(origin.error(
                        "telemetry",
                        format!(
                            "a second `telemetry:` document (the first is at {})",
                            first.origin.at("telemetry")
                        ),
                    ));
                } else {
                    self.set.telemetry = Some(Located {
                        value: *t,
                        origin,
                        key: "telemetry".into(),
                    });
                }
            }
            Document::Include(list) => {
                let base = origin
                    .file
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_default();
                for (i, item) in list.iter().enumerate() {
                    let at = origin.at(&format!("include[{i}]"));
                    self.load_path(&base.join(item), Some(at));
                }
            }
        }
    }
}

/// An error at `span` of the file `path`, under `key`.
fn at_span(path: &Path, span: Span, key: String, message: String) -> ConfigError {
    ConfigError::new(
        Location {
            file: path.to_owned(),
            line: span.line,
            column: span.column,
            key,
        },
        message,
    )
}

fn is_apis_yaml(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(".apis.yaml") || n.ends_with(".apis.yml"))
}

fn is_yaml(p: &Path) -> bool {
    matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
}

/// Turns a model (serde) error into a located, readable config error.
fn model_error(origin: &Origin, e: CompileError) -> ConfigError {
    let message = friendlier(&e.key, e.message);
    let location = match message
        .strip_prefix("unknown document kind `")
        .and_then(|r| r.split('`').next())
    {
        Some(kind) => origin.key_at(kind),
        None if e.at_key => origin.key_at(&e.key),
        None => origin.at(&e.key),
    };
    ConfigError::new(location, message)
}

fn friendlier(key: &str, message: String) -> String {
    if let Some(rest) = message.strip_prefix("unknown variant `") {
        if key.is_empty() {
            return format!("unknown document kind `{rest}");
        }
    }
    if message.starts_with("invalid type: map, expected enum") {
        return "expected a map with exactly one key (the name of the document kind)".into();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "BACKEND_PORT").then(|| "2010".into())
    }

    #[test]
    fn loads_the_membrane_benchmark_configs() {
        let set = load_str(
            "t.yaml",
            "api:\n  port: 2000\n  flow:\n    - return:\n        status: 200\n---\napi:\n  port: 2001\n  target:\n    host: 127.0.0.1\n    port: ${BACKEND_PORT}\n",
            &env,
        )
        .unwrap();
        assert_eq!(set.apis.len(), 2);
        assert_eq!(set.apis[1].value.target.as_ref().unwrap().port, Some(2010));
        assert_eq!(set.apis[1].origin.at("api.target.port").line, 11);
    }

    #[test]
    fn unknown_key_points_at_the_key() {
        let err = load_str("t.yaml", "api:\n  port: 2000\n  prot: 1\n", &env).unwrap_err();
        let e = &err.0[0];
        assert_eq!((e.location.line, e.location.column), (3, 3), "{e}");
        assert_eq!(e.location.key, "api.prot");
        assert!(e.message.contains("unknown field `prot`"), "{e}");
    }

    #[test]
    fn membranes_documents_name_the_alternative() {
        let err = load_str("t.yaml", "configuration:\n  jmxRouterName: demo\n", &env).unwrap_err();
        assert!(
            err.0[0]
                .message
                .contains("`jmxRouterName` is not supported: JMX"),
            "{err}"
        );
        let err = load_str("t.yaml", "configuration:\n  production: false\n", &env).unwrap_err();
        assert!(err.0[0].message.contains("never show internals"), "{err}");
        let set = load_str(
            "t.yaml",
            "configuration:\n  production: true\n  httpClientConfig:\n    proxy: { host: proxy.local, port: 3128 }\n",
            &env,
        )
        .unwrap();
        let c = set.configuration.unwrap().value;
        assert_eq!(c.http_client_config.unwrap().proxy.unwrap().port, 3128);
    }

    #[test]
    fn membranes_pem_key_form_gives_certificate_and_key() {
        let set = load_str(
            "t.yaml",
            "api:\n  port: 443\n  ssl:\n    key:\n      private: { location: k.pem }\n      certificates: [ { location: c.pem } ]\n  flow: [ { return: {} } ]\n",
            &env,
        )
        .unwrap();
        let ssl = set.apis[0].value.ssl.as_ref().unwrap();
        assert_eq!(ssl.key.as_deref(), Some("k.pem"));
        assert_eq!(ssl.certificate.as_deref(), Some("c.pem"));
        let err = load_str(
            "t.yaml",
            "api:\n  port: 443\n  ssl:\n    key:\n      private: { location: k.pem }\n      certificates: [ { location: a.pem }, { location: b.pem } ]\n",
            &env,
        )
        .unwrap_err();
        assert!(err.to_string().contains("exactly one PEM file"), "{err}");
        assert!(err.to_string().contains("t.yaml:4:"), "{err}");
    }

    #[test]
    fn components_are_resolved_with_errors_in_place() {
        let set = load_str(
            "t.yaml",
            "components:\n  log:\n    chain:\n      - log: {}\n---\napi:\n  port: 2000\n  flow:\n    - $ref: '#/components/log'\n    - return: {}\n",
            &env,
        )
        .unwrap();
        assert_eq!(set.apis.len(), 1);
        assert_eq!(set.apis[0].value.flow.len(), 2);
        let err = load_str(
            "t.yaml",
            "components:\n  a: {}\n---\napi:\n  port: 2000\n  flow:\n    - $ref: '#/components/b'\n",
            &env,
        )
        .unwrap_err();
        assert_eq!(err.0.len(), 2, "{err}");
        assert_eq!(
            (err.0[0].location.line, err.0[0].location.key.as_str()),
            (2, "components.a")
        );
        assert_eq!(err.0[1].location.line, 7, "{err}");
        assert!(err.0[1].message.contains("no component named `b`"), "{err}");
    }

    #[test]
    fn every_error_of_every_document_is_reported() {
        let err = load_str(
            "t.yaml",
            "api:\n  port: 99999\n---\napi:\n  port: 1\n  bogus: 2\n---\nnope: 1\n",
            &env,
        )
        .unwrap_err();
        assert_eq!(err.0.len(), 3, "{err}");
        assert!(
            err.0[2].message.contains("unknown document kind `nope`"),
            "{err}"
        );
    }

    #[test]
    fn missing_env_is_an_error() {
        let err = load_str("t.yaml", "api:\n  port: ${NOPE_NOT_SET}\n", &env).unwrap_err();
        assert!(err.0[0].message.contains("NOPE_NOT_SET"));
        assert_eq!(err.0[0].location.line, 2);
    }

    #[test]
    fn includes_and_folders() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("more")).unwrap();
        std::fs::write(
            dir.path().join("main.yaml"),
            "include:\n  - more\n---\napi:\n  port: 1\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("more/a.yaml"), "api:\n  port: 2\n").unwrap();
        std::fs::write(dir.path().join("more/b.yml"), "api:\n  port: 3\n").unwrap();
        std::fs::write(dir.path().join("more/ignored.txt"), "x").unwrap();
        let set = load_with_env(&[dir.path().join("main.yaml")], &env).unwrap();
        let ports: Vec<u16> = set.apis.iter().map(|a| a.value.port).collect();
        assert_eq!(ports, vec![2, 3, 1]);
        assert_eq!(set.files.len(), 3);

        // With `*.apis.yaml` files, a folder is read for those only (Membrane's rule).
        std::fs::create_dir(dir.path().join("apis")).unwrap();
        std::fs::write(dir.path().join("apis/shop.apis.yaml"), "api:\n  port: 4\n").unwrap();
        std::fs::write(dir.path().join("apis/shop.oas.yaml"), "openapi: 3.0.0\n").unwrap();
        let set = load_with_env(&[dir.path().join("apis")], &env).unwrap();
        let ports: Vec<u16> = set.apis.iter().map(|a| a.value.port).collect();
        assert_eq!(ports, vec![4]);

        std::fs::write(dir.path().join("bad.yaml"), "include:\n  - missing.yaml\n").unwrap();
        let err = load_with_env(&[dir.path().join("bad.yaml")], &env).unwrap_err();
        assert_eq!(err.0[0].location.line, 2, "{err}");
    }

    #[test]
    fn yes_no_flags() {
        let set = load_str(
            "t.yaml",
            "gateway:\n  accessLog: no\n---\napi:\n  port: 1\n  path:\n    uri: /a\n    isRegExp: yes\n",
            &env,
        )
        .unwrap();
        assert!(matches!(
            set.gateway.access_log,
            Some(crate::model::AccessLog::Flag(crate::units::Flag(false)))
        ));
        assert!(set.apis[0].value.path.as_ref().unwrap().is_reg_exp.0);
    }
}
