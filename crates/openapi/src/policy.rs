//! The step put in front of an OpenAPI-deployed API's flow (or where Membrane's
//! `openapiValidator` stands in it): finds the operation (404/405, always: the API's paths and
//! methods are the spec's), checks the `security` requirements against the credentials accepted
//! so far (401/403) and validates the request (400/415) and the response (502) when asked.

use std::sync::Arc;

use http::header;
use turnpike_core::problems;
use turnpike_core::{BodyNeed, Exchange, Outcome, Policy, Problem, ProblemType};

use crate::spec::{Found, Spec};
use crate::validate::{self, Violation};

use turnpike_core::exchange::MatchedOperation as MatchedOp;

/// Validates requests and/or responses against one spec.
#[derive(Debug)]
pub struct OpenApiValidator {
    spec: Arc<Spec>,
    requests: bool,
    responses: bool,
    operations: bool,
    details: bool,
    security: bool,
}

impl OpenApiValidator {
    /// A validator for `spec`.
    pub fn new(spec: Arc<Spec>, requests: bool, responses: bool) -> Self {
        OpenApiValidator {
            spec,
            requests,
            responses,
            operations: false,
            details: true,
            security: false,
        }
    }

    /// The same validator, which also checks each operation's `security` requirements (and
    /// the spec's global ones) in the request phase, before the request itself: 401 when
    /// credentials of the kind asked for are missing, 403 when they do not fit (Membrane's
    /// `validateSecurity`). Load [`Spec::check_security`] first: requirements it reports
    /// answer 403.
    pub fn with_security(mut self) -> Self {
        self.security = true;
        self
    }

    /// The same validator, whose rejections leave the violations out (`validationDetails: no`).
    pub fn without_details(mut self) -> Self {
        self.details = false;
        self
    }

    /// The same validator, which also records the matched operation
    /// ([`turnpike_core::exchange::MatchedOperation`]) and its path parameters for the flows of
    /// single operations.
    pub fn with_operations(mut self) -> Self {
        self.operations = true;
        self
    }

    fn problem(&self, ty: &'static ProblemType, detail: String, v: &[Violation]) -> Problem {
        if !self.details {
            return Problem::new(ty);
        }
        Problem::new(ty).with_detail(detail).with_member(
            "errors",
            serde_json::Value::Array(v.iter().map(Violation::to_json).collect()),
        )
    }
}

impl Policy for OpenApiValidator {
    fn name(&self) -> &'static str {
        "openapi"
    }

    fn body_need(&self) -> BodyNeed {
        if self.requests && self.spec.has_body_schemas() {
            BodyNeed::Buffer
        } else {
            BodyNeed::None
        }
    }

    fn response_needs_request(&self) -> bool {
        // The response phase reads the operation matched in the request phase (an extension).
        false
    }

    fn response_body_need(&self) -> BodyNeed {
        if self.responses {
            BodyNeed::Buffer
        } else {
            BodyNeed::None
        }
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let path = ex.request.uri.path();
        match self.spec.find(&ex.request.method, path) {
            // Paths and methods come from the spec, validated or not.
            Found::NoPath => {
                let v = [Violation {
                    location: "path".into(),
                    message: format!("`{path}` matches no path of the spec"),
                }];
                Outcome::Reject(self.problem(
                    &problems::NOT_FOUND,
                    format!("{} {path}", ex.request.method),
                    &v,
                ))
            }
            // A CORS preflight is not an operation of the spec: it goes on to the flow (where a
            // `cors` policy answers it).
            Found::NoMethod(_)
                if ex.request.method == http::Method::OPTIONS
                    && ex
                        .request
                        .headers
                        .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD) =>
            {
                Outcome::Continue
            }
            Found::NoMethod(item) => {
                let v = [Violation {
                    location: "method".into(),
                    message: format!(
                        "{} is not allowed on `{}` (allowed: {})",
                        ex.request.method,
                        item.template,
                        item.allow.to_str().unwrap_or("")
                    ),
                }];
                Outcome::Reject(
                    self.problem(
                        &problems::METHOD_NOT_ALLOWED,
                        format!("{} {path}", ex.request.method),
                        &v,
                    )
                    .with_header(header::ALLOW, item.allow.clone()),
                )
            }
            Found::Op(item, op, params, (path_i, op_i)) => {
                if self.responses || self.operations {
                    ex.extensions.insert(MatchedOp {
                        path: path_i,
                        op: op_i,
                    });
                }
                if self.operations {
                    // The operations' flows read the operation's path parameters.
                    ex.params = params.clone();
                }
                if self.security {
                    for sec in [self.spec.security.as_ref(), op.security.as_ref()]
                        .into_iter()
                        .flatten()
                    {
                        if let Err(d) = sec.check(ex.authentications()) {
                            let ty = if d.status == 401 {
                                &problems::UNAUTHORIZED
                            } else {
                                &problems::FORBIDDEN
                            };
                            return Outcome::Reject(self.problem(
                                ty,
                                format!(
                                    "the security requirements of {} {}{} are not met",
                                    op.method, self.spec.base_path, item.template
                                ),
                                &d.violations,
                            ));
                        }
                    }
                }
                if !self.requests {
                    return Outcome::Continue;
                }
                // Path parameters index into the path as routed by the spec's own matcher.
                let saved = std::mem::replace(&mut ex.params, params);
                let report = validate::validate_request(op, ex);
                ex.params = saved;
                if report.violations.is_empty() {
                    return Outcome::Continue;
                }
                let ty = if report.too_large {
                    &problems::BODY_TOO_LARGE
                } else if report.unsupported_media_type {
                    &problems::UNSUPPORTED_MEDIA_TYPE
                } else {
                    &problems::VALIDATION
                };
                let n = report.violations.len();
                Outcome::Reject(self.problem(
                    ty,
                    format!(
                        "{n} violation{} of {} {}",
                        if n == 1 { "" } else { "s" },
                        op.method,
                        format_args!("{}{}", self.spec.base_path, item.template)
                    ),
                    &report.violations,
                ))
            }
        }
    }

    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        if !self.responses {
            return Outcome::Continue;
        }
        let Some(m) = ex.extensions.get::<MatchedOp>().copied() else {
            return Outcome::Continue;
        };
        let Some(op) = self.spec.paths.get(m.path).and_then(|p| p.ops.get(m.op)) else {
            return Outcome::Continue;
        };
        let v = validate::validate_response(op, ex);
        if v.is_empty() {
            return Outcome::Continue;
        }
        let n = v.len();
        Outcome::Reject(self.problem(
            &problems::RESPONSE_VALIDATION,
            format!(
                "{n} violation{} in the response",
                if n == 1 { "" } else { "s" }
            ),
            &v,
        ))
    }
}
