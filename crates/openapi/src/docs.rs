//! `/api-docs`: the list of the specs deployed on a port, each spec as JSON and YAML, and a small
//! interactive page (`/api-docs/ui`) that lists a spec's operations and can send requests to them.
//! The page is self-written HTML and JavaScript compiled into the binary (no CDN, no npm bundle).
//!
//! The served documents are the bundled specs (referenced files included) with `servers`
//! rewritten to the gateway-relative base path, so that tools pointed at them call the gateway.

use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Response};
use serde_json::Value;
use turnpike_core::problems;
use turnpike_core::{Body, Exchange, Outcome, Policy, Problem};
use yaml_rust2::{Yaml, YamlEmitter};

use crate::spec::Spec;

/// The prefix every docs URL starts with.
pub const PREFIX: &str = "/api-docs";

const UI_HTML: &str = include_str!("ui.html");

#[derive(Debug)]
struct Entry {
    id: String,
    json: Bytes,
    yaml: Bytes,
}

/// The policy answering `/api-docs` requests of one port.
#[derive(Debug)]
pub struct ApiDocs {
    entries: Vec<Entry>,
    index: Bytes,
}

impl ApiDocs {
    /// Prepares every document (JSON and YAML text) once.
    pub fn new(specs: &[Arc<Spec>]) -> Self {
        let mut entries: Vec<Entry> = Vec::new();
        let mut list = Vec::new();
        for s in specs {
            let mut id = s.id.clone();
            let mut n = 2;
            while entries.iter().any(|e| e.id == id) {
                id = format!("{}-{n}", s.id);
                n += 1;
            }
            let mut doc = s.doc.clone();
            if let Value::Object(m) = &mut doc {
                let base = match &s.published_url {
                    Some(url) => url.as_str(),
                    None if s.base_path.is_empty() => "/",
                    None => s.base_path.as_str(),
                };
                m.insert("servers".into(), serde_json::json!([{ "url": base }]));
            }
            let json = Bytes::from(serde_json::to_vec_pretty(&doc).unwrap_or_default());
            let mut yaml = String::new();
            let _ = YamlEmitter::new(&mut yaml).dump(&to_yaml(&doc));
            yaml.push('\n');
            list.push(serde_json::json!({
                "id": id,
                "title": s.title,
                "version": s.version,
                "basePath": if s.base_path.is_empty() { "/" } else { s.base_path.as_str() },
                "json": format!("{PREFIX}/{id}.json"),
                "yaml": format!("{PREFIX}/{id}.yaml"),
                "ui": format!("{PREFIX}/ui/{id}"),
            }));
            entries.push(Entry {
                id,
                json,
                yaml: Bytes::from(yaml),
            });
        }
        let index = Bytes::from(serde_json::to_vec_pretty(&Value::Array(list)).unwrap_or_default());
        ApiDocs { entries, index }
    }

    fn reply(content_type: &'static str, body: Bytes) -> Response<Body> {
        let mut r = Response::new(Body::full(body));
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        r
    }
}

impl Policy for ApiDocs {
    fn name(&self) -> &'static str {
        "apiDocs"
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        if ex.request.method != Method::GET && ex.request.method != Method::HEAD {
            return Outcome::Reject(
                Problem::new(&problems::METHOD_NOT_ALLOWED)
                    .with_detail("the API documentation is read with GET")
                    .with_header(header::ALLOW, HeaderValue::from_static("GET, HEAD")),
            );
        }
        let path = ex.request.uri.path();
        let rest = path
            .strip_prefix(PREFIX)
            .unwrap_or("")
            .trim_end_matches('/');
        let rest = rest.strip_prefix('/').unwrap_or(rest);
        let find = |id: &str| self.entries.iter().find(|e| e.id == id);
        let res = if rest.is_empty() {
            Some(Self::reply("application/json", self.index.clone()))
        } else if rest == "ui" || rest.starts_with("ui/") {
            Some(Self::reply(
                "text/html; charset=utf-8",
                Bytes::from_static(UI_HTML.as_bytes()),
            ))
        } else if let Some(e) = rest
            .strip_suffix(".json")
            .and_then(find)
            .or_else(|| find(rest))
        {
            Some(Self::reply("application/json", e.json.clone()))
        } else {
            rest.strip_suffix(".yaml")
                .or_else(|| rest.strip_suffix(".yml"))
                .and_then(find)
                .map(|e| Self::reply("application/yaml", e.yaml.clone()))
        };
        match res {
            Some(r) => Outcome::Respond(r),
            None => Outcome::Reject(
                Problem::new(&problems::NOT_FOUND)
                    .with_detail(format!("`{path}`: see {PREFIX} for the deployed specs")),
            ),
        }
    }
}

/// Converts JSON into a YAML tree (for the YAML form of a spec).
pub fn to_yaml(v: &Value) -> Yaml {
    match v {
        Value::Null => Yaml::Null,
        Value::Bool(b) => Yaml::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Yaml::Integer(i),
            None => Yaml::Real(n.to_string()),
        },
        Value::String(s) => Yaml::String(s.clone()),
        Value::Array(a) => Yaml::Array(a.iter().map(to_yaml).collect()),
        Value::Object(m) => {
            let mut h = yaml_rust2::yaml::Hash::new();
            for (k, v) in m {
                h.insert(Yaml::String(k.clone()), to_yaml(v));
            }
            Yaml::Hash(h)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_round_trips() {
        let v = serde_json::json!({"a": [1, 2.5, "x: y", null, true], "b": {"c": "multi\nline"}});
        let mut out = String::new();
        YamlEmitter::new(&mut out).dump(&to_yaml(&v)).unwrap();
        let back = turnpike_config::yaml::parse_documents(&out, &|_| None).unwrap();
        let json =
            turnpike_config::yaml::to_json(&back[0], &mut String::new(), &mut Default::default());
        assert_eq!(json, v);
    }
}
