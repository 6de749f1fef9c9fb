//! `basicAuthentication`: HTTP Basic credentials checked against listed users, an htpasswd file
//! and the consumers' `basic` credentials. 401 with `WWW-Authenticate` when missing or wrong.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use base64::{DecodeSliceError, Engine};
use http::HeaderValue;
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_config::units::Flag;
use turnpike_config::BasicUser;
use turnpike_core::exchange::{AuthMethod, Authentication, Identity};
use turnpike_core::{CompileContext, CompileError, PolicyFactory};
use turnpike_core::{Exchange, Outcome, Policy};

use super::password::PasswordCheck;
use super::AllowList;
use super::{admit, authorization, unauthorized, Allow};
use crate::consumers::{self, Consumers};
use crate::err;

/// The users of `basicAuthentication`, each written as `{ username, password }` or as
/// Membrane's `user: { username, password }`.
fn users<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<BasicUser>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Entry {
        Wrapped { user: BasicUser },
        Plain(BasicUser),
    }
    let entries = Vec::<serde_json::Value>::deserialize(d)?;
    entries
        .into_iter()
        .map(|v| {
            let wrapped = v
                .as_object()
                .is_some_and(|o| o.len() == 1 && o.contains_key("user"));
            if wrapped {
                serde_json::from_value::<Entry>(v)
                    .map(|e| match e {
                        Entry::Wrapped { user } | Entry::Plain(user) => user,
                    })
                    .map_err(serde::de::Error::custom)
            } else {
                BasicUser::deserialize(v).map_err(serde::de::Error::custom)
            }
        })
        .collect()
}

/// `basicAuthentication`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BasicAuthSettings {
    /// Users listed here: `{ username, password }`, or Membrane's `user: { username, password }`.
    #[serde(default, deserialize_with = "users")]
    #[schemars(with = "Vec<BasicUser>")]
    pub users: Vec<BasicUser>,
    /// Users read from an htpasswd file (bcrypt, SHA-crypt or `{SHA}` lines).
    #[serde(default)]
    pub htpasswd_file_provider: Option<FileLocation>,
    /// Also accept the `basic` credentials of `consumer:` documents (default true).
    #[serde(default)]
    pub consumers: Option<Flag>,
    /// Realm in `WWW-Authenticate` (default `turnpike`).
    #[serde(default)]
    pub realm: Option<String>,
    /// Restrict access to these consumers or groups.
    #[serde(default)]
    pub allow: Option<AllowList>,
    /// Remove `Authorization` before the request goes to the backend (default true, as
    /// Membrane does: the backend never sees the password).
    #[serde(default)]
    pub hide_credentials: Option<Flag>,
}

/// A file path, relative to the config file.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FileLocation {
    /// The path.
    pub location: String,
}

/// The compiled policy.
pub struct BasicAuth {
    users: HashMap<String, PasswordCheck>,
    consumers: Option<Arc<Consumers>>,
    challenge: HeaderValue,
    allow: Option<Allow>,
    htpasswd: Option<std::path::PathBuf>,
    hide: bool,
}

fn read_htpasswd(path: &Path, users: &mut HashMap<String, PasswordCheck>) -> Result<(), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (user, hash) = line
            .split_once(':')
            .ok_or_else(|| format!("{}:{}: expected `user:hash`", path.display(), n + 1))?;
        let check =
            PasswordCheck::new(hash).map_err(|m| format!("{}:{}: {m}", path.display(), n + 1))?;
        users.insert(user.to_owned(), check);
    }
    Ok(())
}

/// Decoded `user:password` up to this many bytes stays on the stack; longer ones go to the heap.
const STACK_CREDENTIALS: usize = 256;

/// Runs for every request a basic-auth check sees: finds `Authorization: Basic
/// base64(user:password)` and calls `f` with the user and the password, without allocating
/// for credentials of usual length. `None` when the header is missing or malformed.
fn with_basic_credentials<R>(ex: &Exchange, f: impl FnOnce(&str, &str) -> R) -> Option<R> {
    let encoded = authorization(ex, b"basic")?;
    let engine = &base64::engine::general_purpose::STANDARD;
    let mut stack = [0u8; STACK_CREDENTIALS];
    let heap;
    let decoded: &[u8] = match engine.decode_slice(encoded, &mut stack) {
        Ok(n) => &stack[..n],
        Err(DecodeSliceError::OutputSliceTooSmall) => {
            heap = engine.decode(encoded).ok()?;
            &heap
        }
        Err(DecodeSliceError::DecodeError(_)) => return None,
    };
    let (user, password) = std::str::from_utf8(decoded).ok()?.split_once(':')?;
    Some(f(user, password))
}

impl PolicyFactory for BasicAuth {
    const NAME: &'static str = "basicAuthentication";
    const AUTHENTICATES: bool = true;
    type Settings = BasicAuthSettings;

    /// Compiles the policy: reads the htpasswd file and checks every hash format.
    fn compile(c: BasicAuthSettings, ctx: &CompileContext<'_>) -> Result<Self, CompileError> {
        let consumers = crate::consumers::shared(ctx);
        let mut users = HashMap::new();
        for (i, u) in c.users.iter().enumerate() {
            let check = PasswordCheck::new(&u.password)
                .map_err(|m| err(&format!("users[{i}].password"), m))?;
            if users.insert(u.username.clone(), check).is_some() {
                return Err(err(
                    &format!("users[{i}].username"),
                    format!("user `{}` is listed twice", u.username),
                ));
            }
        }
        let htpasswd = c
            .htpasswd_file_provider
            .as_ref()
            .map(|f| ctx.base_dir.join(&f.location));
        if let Some(path) = &htpasswd {
            read_htpasswd(path, &mut users).map_err(|m| err("htpasswdFileProvider.location", m))?;
        }
        let use_consumers = c.consumers.is_none_or(|f| f.0);
        if users.is_empty() && (!use_consumers || consumers.is_empty()) {
            return Err(err("", "no users: list `users`, give an `htpasswdFileProvider`, or define consumers with `basic` credentials"));
        }
        let realm = c.realm.as_deref().unwrap_or("turnpike");
        if realm.contains('"') {
            return Err(err("realm", "must not contain `\"`"));
        }
        let challenge =
            HeaderValue::from_str(&format!("Basic realm=\"{realm}\", charset=\"UTF-8\""))
                .map_err(|_| err("realm", "not a valid header value"))?;
        let allow = match &c.allow {
            Some(a) => Allow::compile(a, &consumers).map_err(|m| err("allow", m))?,
            None => None,
        };
        Ok(BasicAuth {
            users,
            consumers: use_consumers.then(|| consumers.clone()),
            challenge,
            allow,
            htpasswd,
            hide: c.hide_credentials.is_none_or(|f| f.0),
        })
    }
}

impl BasicAuth {
    /// Checks a user and password; on success, the consumer of that user name (if any).
    fn check(&self, user: &str, password: &str) -> Option<Option<Arc<consumers::Consumer>>> {
        let (ok, consumer) = if let Some(check) = self.users.get(user) {
            (
                check.verify(password),
                self.consumers
                    .as_ref()
                    .and_then(|c| c.by_user(user))
                    .map(|(c, _)| c.clone()),
            )
        } else if let Some((c, check)) = self.consumers.as_ref().and_then(|c| c.by_user(user)) {
            (check.verify(password), Some(c.clone()))
        } else {
            // Same work for unknown users as for known ones.
            let _ = PasswordCheck::Plain([0; 32]).verify(password);
            (false, None)
        };
        ok.then_some(consumer)
    }
}

impl Policy for BasicAuth {
    fn name(&self) -> &'static str {
        "basicAuthentication"
    }

    fn files(&self) -> Vec<std::path::PathBuf> {
        self.htpasswd.iter().cloned().collect()
    }

    fn response_needs_request(&self) -> bool {
        self.consumers
            .as_ref()
            .is_some_and(|c| c.response_needs_request())
    }

    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let checked = with_basic_credentials(ex, |user, password| {
            self.check(user, password)
                .map(|consumer| (user.to_owned(), consumer))
        });
        let (user, consumer) = match checked {
            None => {
                return unauthorized("HTTP Basic credentials are required", Some(&self.challenge))
            }
            Some(None) => {
                return unauthorized("the user name or password is wrong", Some(&self.challenge))
            }
            Some(Some(found)) => found,
        };
        if self.hide {
            ex.request.headers.remove(http::header::AUTHORIZATION);
        }
        ex.record_authentication(Authentication {
            method: AuthMethod::Basic,
            scopes: Vec::new(),
        });
        let identity = Identity {
            subject: Some(user),
            ..Default::default()
        };
        admit(ex, consumer.as_ref(), identity, self.allow.as_ref(), &[])
    }

    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        consumers::leave(ex)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::exchange;
    use base64::engine::general_purpose::STANDARD;
    use proptest::prelude::*;

    fn parsed(authorization: &str) -> Option<(String, String)> {
        let ex = exchange("GET", "/", &[("authorization", authorization)], "");
        with_basic_credentials(&ex, |u, p| (u.to_owned(), p.to_owned()))
    }

    fn pair(u: &str, p: &str) -> Option<(String, String)> {
        Some((u.to_owned(), p.to_owned()))
    }

    #[test]
    fn credentials_are_found_in_the_usual_shapes() {
        let token = STANDARD.encode("loadtest:secret");
        assert_eq!(
            parsed(&format!("Basic {token}")),
            pair("loadtest", "secret")
        );
        assert_eq!(
            parsed(&format!("basic {token}")),
            pair("loadtest", "secret")
        );
        assert_eq!(
            parsed(&format!("BASIC   {token}  ")),
            pair("loadtest", "secret")
        );
        // The password is everything after the first colon.
        let token = STANDARD.encode("u:p:w:");
        assert_eq!(parsed(&format!("Basic {token}")), pair("u", "p:w:"));
        let token = STANDARD.encode(":");
        assert_eq!(parsed(&format!("Basic {token}")), pair("", ""));
    }

    #[test]
    fn malformed_credentials_are_none() {
        let ex = exchange("GET", "/", &[], "");
        assert_eq!(with_basic_credentials(&ex, |_, _| ()), None, "no header");
        assert_eq!(parsed("Basic"), None, "no token");
        assert_eq!(parsed(&format!("Bearer {}", STANDARD.encode("a:b"))), None);
        assert_eq!(parsed("Basic not*base64"), None);
        assert_eq!(
            parsed(&format!("Basic {}", STANDARD.encode("no-colon"))),
            None
        );
        assert_eq!(
            parsed(&format!("Basic {}", STANDARD.encode(b"u:\xff\xfe"))),
            None,
            "not UTF-8"
        );
    }

    #[test]
    fn long_credentials_are_decoded_on_the_heap() {
        let password = "p".repeat(3 * STACK_CREDENTIALS);
        let token = STANDARD.encode(format!("user:{password}"));
        assert_eq!(parsed(&format!("Basic {token}")), pair("user", &password));
        // Just at and just over the stack buffer's size.
        for extra in [0, 1] {
            let password = "q".repeat(STACK_CREDENTIALS - 2 + extra);
            let token = STANDARD.encode(format!("u:{password}"));
            assert_eq!(parsed(&format!("Basic {token}")), pair("u", &password));
        }
    }

    proptest! {
        #[test]
        fn any_user_and_password_round_trip(
            user in "[^:\\x00]{0,40}",
            password in "\\PC{0,400}",
        ) {
            let token = STANDARD.encode(format!("{user}:{password}"));
            prop_assert_eq!(parsed(&format!("Basic {token}")), pair(&user, &password));
        }

        #[test]
        fn arbitrary_headers_never_panic(value in "[ -~]{0,600}") {
            let _ = parsed(&value);
        }
    }
}
