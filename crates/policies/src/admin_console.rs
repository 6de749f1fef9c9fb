//! `adminConsole`: Membrane's admin console on an API's own port. Answers every request with the
//! gateway's admin service (the web console at `/console`, `/` redirecting there, and the admin
//! API under `/admin/v1/`), as the admin listener does — with its token, when the `admin:`
//! document sets one. `readOnly` answers only reading requests (GET, HEAD): the configuration
//! cannot be changed through this API. Put an authentication policy before it, as Membrane's
//! examples do.

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Response, StatusCode};
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_config::units::Flag;
use turnpike_core::policy::{Resume, Wait};
use turnpike_core::problem::{types, Problem};
use turnpike_core::{Body, BodyNeed, CompileContext, CompileError, Exchange, Outcome, Phases};
use turnpike_core::{Policy, PolicyFactory};

/// `adminConsole`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AdminConsoleSettings {
    /// Answer reading requests only (GET, HEAD); others are 405.
    #[serde(default)]
    pub read_only: Flag,
}

/// The compiled `adminConsole` policy.
#[derive(Debug)]
pub struct AdminConsole {
    read_only: bool,
}

/// How long an admin request may take (a reload compiles the whole configuration).
const TIMEOUT: Duration = Duration::from_secs(60);

impl PolicyFactory for AdminConsole {
    const NAME: &'static str = "adminConsole";
    const PHASES: Phases = Phases::REQUEST;
    const ANSWERS: bool = true;
    type Settings = AdminConsoleSettings;

    fn compile(c: AdminConsoleSettings, _: &CompileContext<'_>) -> Result<Self, CompileError> {
        Ok(AdminConsole {
            read_only: c.read_only.0,
        })
    }
}

impl Policy for AdminConsole {
    fn name(&self) -> &'static str {
        "adminConsole"
    }

    fn body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    /// Answers with the admin service.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let method = ex.request.method.clone();
        let reading = method == Method::GET || method == Method::HEAD;
        if self.read_only && !reading {
            return Outcome::Reject(
                Problem::new(&types::METHOD_NOT_ALLOWED)
                    .with_detail("this admin console is read-only")
                    .with_header(header::ALLOW, HeaderValue::from_static("GET, HEAD")),
            );
        }
        let path = ex.request.uri.path();
        if reading && path == "/" {
            let mut r = Response::new(Body::Empty);
            *r.status_mut() = StatusCode::FOUND;
            r.headers_mut()
                .insert(header::LOCATION, HeaderValue::from_static("/console"));
            return Outcome::Respond(r);
        }
        let Some(service) = turnpike_core::admin_hook::service() else {
            return Outcome::Reject(
                Problem::new(&types::INTERNAL).with_detail("the admin service is not running"),
            );
        };
        let mut builder = http::Request::builder()
            .method(method)
            .uri(ex.request.uri.clone());
        for (k, v) in &ex.request.headers {
            builder = builder.header(k, v);
        }
        let body = ex.request_bytes().cloned().unwrap_or_default();
        let Ok(req) = builder.body(body) else {
            return Outcome::Reject(Problem::new(&types::INTERNAL));
        };
        let answer = service.call(req);
        Outcome::Wait(Wait::new(
            async move {
                let r = answer.await;
                Box::new(move |_: &mut Exchange| {
                    let (parts, body): (_, Bytes) = r.into_parts();
                    Outcome::Respond(Response::from_parts(parts, Body::full(body)))
                }) as Resume
            },
            TIMEOUT,
            |_| Outcome::Reject(Problem::new(&types::POLICY_TIMEOUT)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{exchange, plain};

    #[test]
    fn read_only_refuses_changes_and_the_root_goes_to_the_console() {
        let p = AdminConsole::compile(
            serde_json::from_value(serde_json::json!({ "readOnly": true })).unwrap(),
            &plain(),
        )
        .unwrap();
        let mut ex = exchange("POST", "/admin/v1/reload", &[], "");
        match p.on_request(&mut ex) {
            Outcome::Reject(pr) => assert_eq!(pr.ty.status, StatusCode::METHOD_NOT_ALLOWED),
            _ => panic!("a change through a read-only console"),
        }
        let mut ex = exchange("GET", "/", &[], "");
        match p.on_request(&mut ex) {
            Outcome::Respond(r) => {
                assert_eq!(r.status(), StatusCode::FOUND);
                assert_eq!(r.headers()[header::LOCATION], "/console");
            }
            _ => panic!("no redirect"),
        }
    }
}
