//! `template`: Membrane's body template. Sets the body of the message in the phase it runs in
//! (as [`static`](crate::static_body) does) from a template written inline (`src`) or in a file
//! (`location`), with Membrane's placeholders (`${path}`, `${header['X']}`, `${params.q}`,
//! `${json.name}`, `${statusCode}`, `${property.NAME}`, `${xpath('//x')}`, …); `pretty`
//! re-indents a JSON result. With a JSON content type a placeholder writes a JSON value
//! (`"sub": ${user()}` gives `"sub": "alice"`; inside a string literal, the escaped text). Groovy code (`<% … %>`) cannot run here: it is a load error.

use http::HeaderValue;
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_config::units::Flag;
use turnpike_core::BodyNeed;
use turnpike_core::{CompileContext, CompileError, Exchange, Outcome, Policy, PolicyFactory};

use crate::err;
use crate::static_body::Static;

/// `template`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TemplateSettings {
    /// The template, inline.
    #[serde(default)]
    pub src: Option<String>,
    /// A file holding the template (relative to the configuration file), instead of `src`.
    #[serde(default)]
    pub location: Option<String>,
    /// `Content-Type` of the body (default `text/plain; charset=utf-8`).
    #[serde(default)]
    pub content_type: Option<String>,
    /// Re-indent the result when it is JSON.
    #[serde(default)]
    pub pretty: Flag,
}

/// The compiled `template` policy.
#[derive(Debug)]
pub struct BodyTemplate {
    inner: Static,
    file: Option<std::path::PathBuf>,
}

impl PolicyFactory for BodyTemplate {
    const NAME: &'static str = "template";
    type Settings = TemplateSettings;

    fn compile(c: TemplateSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let (text, file, key) = match (&c.src, &c.location) {
            (Some(s), None) => (s.clone(), None, "src"),
            (None, Some(l)) => {
                let path = ctx.base_dir.join(l);
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| err("location", format!("cannot read {}: {e}", path.display())))?;
                (text, Some(path), "location")
            }
            _ => return Err(err("", "give exactly one of `src` and `location`")),
        };
        crate::language::no_groovy(&text).map_err(|m| err(key, m))?;
        let src = crate::language::compile_template(&text, None, ctx).map_err(|m| err(key, m))?;
        // A template file's extension gives the type when `contentType` does not (as Membrane).
        let extension = c
            .location
            .as_deref()
            .and_then(|l| std::path::Path::new(l).extension())
            .and_then(|e| e.to_str());
        let content_type = match (&c.content_type, extension) {
            (Some(ct), _) => HeaderValue::from_str(ct)
                .map_err(|_| err("contentType", "not a valid header value"))?,
            (None, Some("json")) => HeaderValue::from_static("application/json"),
            (None, Some("xml")) => HeaderValue::from_static("application/xml"),
            (None, _) => HeaderValue::from_static("text/plain; charset=utf-8"),
        };
        // A JSON template writes its values as JSON (Membrane 7.1 and later).
        let json = content_type
            .to_str()
            .is_ok_and(|t| t.split(';').next().unwrap_or("").trim().ends_with("json"));
        let src = if json { src.json() } else { src };
        Ok(BodyTemplate {
            inner: Static {
                name: "template",
                src,
                content_type,
                delay: None,
                pretty: c.pretty.0,
                envelope: None,
            },
            file,
        })
    }
}

impl Policy for BodyTemplate {
    fn name(&self) -> &'static str {
        "template"
    }

    fn body_need(&self) -> BodyNeed {
        self.inner.body_need()
    }

    fn response_body_need(&self) -> BodyNeed {
        self.inner.response_body_need()
    }

    fn files(&self) -> Vec<std::path::PathBuf> {
        self.file.iter().cloned().collect()
    }

    /// Sets the request's body.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        self.inner.on_request(ex)
    }

    /// Sets the response's body.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        self.inner.on_response(ex)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};

    fn compile(yaml: serde_json::Value) -> Result<BodyTemplate, CompileError> {
        BodyTemplate::compile(serde_json::from_value(yaml).unwrap(), &plain())
    }

    #[test]
    fn renders_membrane_placeholders_into_the_body() {
        let t = compile(serde_json::json!({
            "src": "{\"m\":\"${method}\",\"p\":\"${path}\",\"h\":\"${header['X-A']}\",\"q\":\"${params.q}\",\"n\":\"${json.name}\"}",
            "contentType": "application/json",
            "pretty": true
        }))
        .unwrap();
        assert_eq!(t.body_need(), BodyNeed::Buffer);
        let mut ex = exchange("POST", "/a?q=1", &[("x-a", "b")], r#"{"name":"Kiwi"}"#);
        assert!(matches!(t.on_request(&mut ex), Outcome::Continue));
        let body = String::from_utf8(ex.request_bytes().unwrap().to_vec()).unwrap();
        assert_eq!(
            body,
            "{\n  \"m\": \"POST\",\n  \"p\": \"/a\",\n  \"h\": \"b\",\n  \"q\": \"1\",\n  \"n\": \"Kiwi\"\n}"
        );
        assert_eq!(ex.request.headers["content-type"], "application/json");
    }

    #[test]
    fn json_templates_write_json_values() {
        let t = compile(serde_json::json!({
            "src": "{\"u\": ${header.x-u}, \"n\": ${json.n}, \"in\": \"a ${header.x-u} b\", \"m\": ${header.x-none}, \"p\": ${property.p}, \"e\": ${property.p.k + 1}, \"s\": ${statusCode}, \"l\": ${json.l}}",
            "contentType": "application/json"
        }))
        .unwrap();
        let mut ex = exchange(
            "POST",
            "/",
            &[("x-u", "al\"ice")],
            r#"{"n": 42, "l": [1, "two"]}"#,
        );
        turnpike_core::properties::set_property(&mut ex, "p", serde_json::json!({"k": 2}));
        assert!(matches!(t.on_request(&mut ex), Outcome::Continue));
        let body = String::from_utf8(ex.request_bytes().unwrap().to_vec()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&body).expect(&body);
        assert_eq!(
            v,
            serde_json::json!({"u": "al\"ice", "n": 42, "in": "a al\"ice b", "m": null,
                "p": {"k": 2}, "e": 3, "s": null, "l": [1, "two"]})
        );
        // A text template inserts the text as it is.
        let t = compile(serde_json::json!({ "src": "u=${header.x-u}" })).unwrap();
        let mut ex = exchange("GET", "/", &[("x-u", "a\"b")], "");
        assert!(matches!(t.on_request(&mut ex), Outcome::Continue));
        assert_eq!(ex.request_bytes().unwrap().as_ref(), b"u=a\"b");
    }

    #[test]
    fn groovy_properties_and_bad_shapes_are_load_errors() {
        let e = compile(serde_json::json!({ "src": "<% if (x) { %>a<% } %>" })).unwrap_err();
        assert!(e.message.contains("Groovy"), "{e:?}");
        let e = compile(serde_json::json!({})).unwrap_err();
        assert!(e.message.contains("exactly one"), "{e:?}");
        let e = compile(serde_json::json!({ "location": "/nonexistent/t.txt" })).unwrap_err();
        assert_eq!(e.key, "location");
    }
}
