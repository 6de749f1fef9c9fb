//! The `security` requirements of a spec (Membrane's `validateSecurity`): compiled from the
//! document's `security` lists and `components.securitySchemes`, and checked against the
//! credentials the flow's authentication policies accepted ([`Authentication`]).
//!
//! As in Membrane, the global requirements and the operation's own both apply (an operation's
//! `security` adds to the global one rather than replacing it). A `security` list is satisfied
//! by any one of its requirement objects; a requirement object needs every scheme it names, and
//! every scope it lists granted by some accepted credentials.

use serde_json::Value;
use turnpike_core::exchange::{AuthMethod, Authentication};

use crate::convert;
use crate::load::SpecError;
use crate::schema::Ctx;
use crate::violation::Violation;

/// What a security scheme of the spec asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemeKind {
    /// `type: http`, `scheme: basic`.
    Basic,
    /// `type: http`, `scheme: bearer`: a verified JWT.
    Bearer,
    /// `type: apiKey`: an API key, from the named header or query parameter when the scheme
    /// names them.
    ApiKey {
        /// `name`, when given.
        name: Option<String>,
        /// `in` (`header`, `query`, `cookie`), when given.
        location: Option<String>,
    },
    /// `type: oauth2` or `openIdConnect`: a verified JWT (the flows are not inspected).
    OAuth2,
}

/// One scheme named by a requirement, with the scopes the requirement lists for it.
#[derive(Debug, Clone)]
pub struct Need {
    /// The scheme's name in `components.securitySchemes`.
    pub scheme: String,
    /// What it asks for; `None` when the scheme cannot be checked (undefined or of an
    /// unsupported type): then [`crate::Spec::check_security`] reports it at load.
    pub kind: Option<SchemeKind>,
    /// The scopes listed.
    pub scopes: Vec<String>,
}

/// A `security` list: satisfied by any one of its requirement objects, each of which needs all
/// of its schemes. An empty list asks for nothing.
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// The requirement objects.
    pub alternatives: Vec<Vec<Need>>,
}

/// Why a request does not satisfy a `security` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// 401 (no credentials of the kind asked for) or 403 (credentials that do not fit).
    pub status: u16,
    /// Every violation found, each with Membrane's message.
    pub violations: Vec<Violation>,
}

/// The security schemes of a spec (`components.securitySchemes`) by name: what each asks
/// for, or why it cannot be checked.
pub(crate) struct Schemes(Vec<(String, Result<SchemeKind, String>)>);

impl Schemes {
    /// Runs at load time: reads `components.securitySchemes` (following `$ref`s).
    pub(crate) fn compile(ctx: &Ctx<'_>) -> Result<Schemes, SpecError> {
        let mut out = Vec::new();
        if let Some(Value::Object(m)) = ctx
            .loaded
            .doc
            .get("components")
            .and_then(|c| c.get("securitySchemes"))
        {
            for (name, s) in m {
                let ptr = format!("/components/securitySchemes/{}", convert::escape(name));
                let (s, _) = ctx.resolve(s, ptr)?;
                out.push((name.clone(), scheme_kind(name, s)));
            }
        }
        Ok(Schemes(out))
    }

    fn find(&self, name: &str) -> Option<&Result<SchemeKind, String>> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, k)| k)
    }
}

/// What the scheme `s` (named `name`) asks for, or why it cannot be checked.
fn scheme_kind(name: &str, s: &Value) -> Result<SchemeKind, String> {
    let text = |k: &str| s.get(k).and_then(Value::as_str);
    match text("type") {
        Some("http") => match text("scheme").map(str::to_ascii_lowercase).as_deref() {
            Some("basic") => Ok(SchemeKind::Basic),
            Some("bearer") => Ok(SchemeKind::Bearer),
            Some(other) => Err(format!(
                "the security scheme `{name}` uses the HTTP scheme `{other}`, which `validateSecurity` cannot check (basic and bearer can be)"
            )),
            None => Err(format!(
                "the security scheme `{name}` of type `http` has no `scheme`"
            )),
        },
        Some("apiKey") => Ok(SchemeKind::ApiKey {
            name: text("name").map(str::to_owned),
            location: text("in").map(str::to_owned),
        }),
        Some("oauth2" | "openIdConnect") => Ok(SchemeKind::OAuth2),
        Some("mutualTLS") => Err(format!(
            "the security scheme `{name}` is of type `mutualTLS`, which `validateSecurity` cannot check"
        )),
        Some(other) => Err(format!(
            "the security scheme `{name}` has the unknown type `{other}`"
        )),
        None => Err(format!("the security scheme `{name}` has no `type`")),
    }
}

/// Runs at load time: the `security` list at `ptr` of `owner`, if it has one. Schemes that
/// cannot be checked are reported in `problems` (with where they are named).
pub(crate) fn compile(
    ctx: &Ctx<'_>,
    schemes: &Schemes,
    owner: &Value,
    ptr: &str,
    problems: &mut Vec<SpecError>,
) -> Option<Security> {
    let Value::Array(list) = owner.get("security")? else {
        problems.push(ctx.err(&format!("{ptr}/security"), "`security` must be a list"));
        return Some(Security::default());
    };
    let mut alternatives = Vec::new();
    for (i, req) in list.iter().enumerate() {
        let rptr = format!("{ptr}/security/{i}");
        let Value::Object(req) = req else {
            problems.push(ctx.err(&rptr, "a security requirement must be a map"));
            continue;
        };
        let mut needs = Vec::new();
        for (scheme, scopes) in req {
            let at = format!("{rptr}/{}", convert::escape(scheme));
            let scopes = scopes
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            let kind = match schemes.find(scheme) {
                Some(Ok(k)) => Some(k.clone()),
                Some(Err(why)) => {
                    problems.push(ctx.err(&at, why.clone()));
                    None
                }
                None => {
                    problems.push(ctx.err(
                        &at,
                        format!(
                            "the security scheme `{scheme}` is not in `components.securitySchemes`"
                        ),
                    ));
                    None
                }
            };
            needs.push(Need {
                scheme: scheme.clone(),
                kind,
                scopes,
            });
        }
        alternatives.push(needs);
    }
    Some(Security { alternatives })
}

impl Security {
    /// Runs per request: `Ok` when some requirement object is satisfied by the accepted
    /// credentials `auths` (or the list is empty); otherwise the violations of every
    /// alternative, with the status of the first.
    pub fn check(&self, auths: &[Authentication]) -> Result<(), Denied> {
        let mut all: Vec<(u16, Violation)> = Vec::new();
        for needs in &self.alternatives {
            let errors: Vec<(u16, Violation)> =
                needs.iter().flat_map(|n| check_need(n, auths)).collect();
            if errors.is_empty() {
                return Ok(());
            }
            for e in errors {
                if !all.contains(&e) {
                    all.push(e);
                }
            }
        }
        match all.first() {
            None => Ok(()),
            Some(&(status, _)) => Err(Denied {
                status,
                violations: all.into_iter().map(|(_, v)| v).collect(),
            }),
        }
    }
}

/// The violations of one scheme of a requirement object (Membrane's messages).
fn check_need(need: &Need, auths: &[Authentication]) -> Vec<(u16, Violation)> {
    let at = format!("security.{}", need.scheme);
    let mut out = Vec::new();
    let v = |status: u16, m: String| (status, Violation::new(at.clone(), m));
    let jwt = || auths.iter().any(|a| a.method == AuthMethod::Jwt);
    match &need.kind {
        None => out.push(v(
            403,
            "There is a problem with the OpenAPI configuration at the server side.".into(),
        )),
        Some(SchemeKind::Basic) => {
            if !auths.iter().any(|a| a.method == AuthMethod::Basic) {
                out.push(v(
                    401,
                    "Caller is not authenticated with HTTP and BASIC.".into(),
                ));
            }
        }
        Some(SchemeKind::Bearer) => {
            if !jwt() {
                out.push(v(
                    401,
                    "Caller is not authenticated with HTTP and BEARER.".into(),
                ));
            }
        }
        Some(SchemeKind::OAuth2) => {
            if !jwt() {
                out.push(v(401, "OAuth2 or JWT authentication is required.".into()));
            }
        }
        Some(SchemeKind::ApiKey { name, location }) => {
            let keys: Vec<(&bool, &String)> = auths
                .iter()
                .filter_map(|a| match &a.method {
                    AuthMethod::ApiKey { query, name } => Some((query, name)),
                    _ => None,
                })
                .collect();
            if keys.is_empty() {
                out.push(v(401, "Authentication by API key is required.".into()));
            } else {
                let fits = |(query, got): &(&bool, &String)| {
                    let name_ok = name.as_ref().is_none_or(|n| n.eq_ignore_ascii_case(got));
                    let in_ok = location
                        .as_ref()
                        .is_none_or(|l| l.eq_ignore_ascii_case(key_in(**query)));
                    name_ok && in_ok
                };
                if !keys.iter().any(fits) {
                    let (query, got) = keys[0];
                    if let Some(n) = name.as_ref().filter(|n| !n.eq_ignore_ascii_case(got)) {
                        out.push(v(
                            403,
                            format!("Name of api-key is {got} but should be {n}"),
                        ));
                    }
                    if let Some(l) = location
                        .as_ref()
                        .filter(|l| !l.eq_ignore_ascii_case(key_in(*query)))
                    {
                        out.push(v(
                            403,
                            format!("Api-key is in {} but should be in {l}", key_in(*query)),
                        ));
                    }
                }
            }
        }
    }
    for scope in &need.scopes {
        if !auths.iter().any(|a| a.scopes.contains(scope)) {
            out.push(v(403, format!("Caller is not in scope {scope}")));
        }
    }
    out
}

fn key_in(query: bool) -> &'static str {
    if query {
        "query"
    } else {
        "header"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, query: bool, scopes: &[&str]) -> Authentication {
        Authentication {
            method: AuthMethod::ApiKey {
                query,
                name: name.into(),
            },
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn need(scheme: &str, kind: SchemeKind, scopes: &[&str]) -> Need {
        Need {
            scheme: scheme.into(),
            kind: Some(kind),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn api_key(name: Option<&str>, location: Option<&str>) -> SchemeKind {
        SchemeKind::ApiKey {
            name: name.map(str::to_owned),
            location: location.map(str::to_owned),
        }
    }

    fn messages(d: &Denied) -> Vec<&str> {
        d.violations.iter().map(|v| v.message.as_str()).collect()
    }

    #[test]
    fn api_key_name_and_place_must_fit() {
        let s = Security {
            alternatives: vec![vec![need(
                "k",
                api_key(Some("X-API-KEY"), Some("header")),
                &[],
            )]],
        };
        let d = s.check(&[]).unwrap_err();
        assert_eq!(d.status, 401);
        assert_eq!(messages(&d), ["Authentication by API key is required."]);
        assert_eq!(d.violations[0].location, "security.k");
        // Names compare without regard to case.
        assert!(s.check(&[key("x-api-key", false, &[])]).is_ok());
        let d = s.check(&[key("api_key", false, &[])]).unwrap_err();
        assert_eq!(d.status, 403);
        assert_eq!(
            messages(&d),
            ["Name of api-key is api_key but should be X-API-KEY"]
        );
        let d = s.check(&[key("X-API-KEY", true, &[])]).unwrap_err();
        assert_eq!(
            messages(&d),
            ["Api-key is in query but should be in header"]
        );
        // Another key that fits is enough.
        assert!(s
            .check(&[key("api_key", true, &[]), key("X-Api-Key", false, &[])])
            .is_ok());
    }

    #[test]
    fn scopes_and_alternatives() {
        let write = Security {
            alternatives: vec![vec![need("k", api_key(None, None), &["write"])]],
        };
        let d = write.check(&[key("x-api-key", false, &[])]).unwrap_err();
        assert_eq!(d.status, 403);
        assert_eq!(messages(&d), ["Caller is not in scope write"]);
        assert!(write.check(&[key("x-api-key", false, &["write"])]).is_ok());

        // OR of requirement objects: a JWT or an API key.
        let either = Security {
            alternatives: vec![
                vec![need("jwt", SchemeKind::OAuth2, &[])],
                vec![need("k", api_key(None, None), &[])],
            ],
        };
        assert!(either.check(&[key("x", false, &[])]).is_ok());
        let jwt = Authentication {
            method: AuthMethod::Jwt,
            scopes: vec!["inventory".into()],
        };
        assert!(either.check(std::slice::from_ref(&jwt)).is_ok());
        let d = either.check(&[]).unwrap_err();
        assert_eq!(d.status, 401);
        assert_eq!(
            messages(&d),
            [
                "OAuth2 or JWT authentication is required.",
                "Authentication by API key is required."
            ]
        );

        // AND within one requirement object: Basic and an API key.
        let both = Security {
            alternatives: vec![vec![
                need("basic", SchemeKind::Basic, &[]),
                need("k", api_key(None, None), &[]),
            ]],
        };
        let basic = Authentication {
            method: AuthMethod::Basic,
            scopes: Vec::new(),
        };
        let d = both.check(std::slice::from_ref(&basic)).unwrap_err();
        assert_eq!(messages(&d), ["Authentication by API key is required."]);
        let d = both.check(&[key("x", false, &[])]).unwrap_err();
        assert_eq!(
            messages(&d),
            ["Caller is not authenticated with HTTP and BASIC."]
        );
        assert!(both.check(&[basic, key("x", false, &[])]).is_ok());

        // A scope granted by any credentials counts; the first violation sets the status.
        let scoped = Security {
            alternatives: vec![vec![need(
                "jwt",
                SchemeKind::Bearer,
                &["inventory", "admin"],
            )]],
        };
        let d = scoped.check(std::slice::from_ref(&jwt)).unwrap_err();
        assert_eq!(
            (d.status, messages(&d)),
            (403, vec!["Caller is not in scope admin"])
        );
        let d = scoped.check(&[]).unwrap_err();
        assert_eq!(d.status, 401);
        assert_eq!(d.violations.len(), 3);

        // An empty list, and an empty requirement object, ask for nothing.
        assert!(Security::default().check(&[]).is_ok());
        assert!(Security {
            alternatives: vec![vec![]]
        }
        .check(&[])
        .is_ok());
    }
}
