//! `basicAuthentication`: HTTP Basic credentials checked against listed users, an htpasswd file
//! and the consumers' `basic` credentials. 401 with `WWW-Authenticate` when missing or wrong.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use base64::Engine;
use http::{header, HeaderValue};
use turnpike_config::BasicAuthPolicy;
use turnpike_core::exchange::Identity;
use turnpike_core::{Exchange, Outcome, Policy};

use super::password::PasswordCheck;
use super::{admit, unauthorized, Allow};
use crate::consumers::{self, Consumers};
use crate::{err, CompileError, FlowContext};

/// The compiled policy.
pub struct BasicAuth {
    users: HashMap<String, PasswordCheck>,
    consumers: Option<Arc<Consumers>>,
    challenge: HeaderValue,
    allow: Option<Allow>,
    htpasswd: Option<std::path::PathBuf>,
}

impl BasicAuth {
    /// Compiles the policy: reads the htpasswd file and checks every hash format.
    pub fn compile(c: &BasicAuthPolicy, ctx: &FlowContext<'_>) -> Result<Self, CompileError> {
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
        if users.is_empty() && (!use_consumers || ctx.consumers.is_empty()) {
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
            Some(a) => Allow::compile(a, ctx.consumers).map_err(|m| err("allow", m))?,
            None => None,
        };
        Ok(BasicAuth {
            users,
            consumers: use_consumers.then(|| ctx.consumers.clone()),
            challenge,
            allow,
            htpasswd,
        })
    }
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

/// Splits `Authorization: Basic base64(user:password)`.
pub(crate) fn basic_credentials(ex: &Exchange) -> Option<(String, String)> {
    let value = ex
        .request
        .headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, rest) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_owned(), p.to_owned()))
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
        let Some((user, password)) = basic_credentials(ex) else {
            return unauthorized("HTTP Basic credentials are required", Some(&self.challenge));
        };
        let (ok, consumer) = if let Some(check) = self.users.get(&user) {
            (
                check.verify(&password),
                self.consumers
                    .as_ref()
                    .and_then(|c| c.by_user(&user))
                    .map(|(c, _)| c.clone()),
            )
        } else if let Some((c, check)) = self.consumers.as_ref().and_then(|c| c.by_user(&user)) {
            (check.verify(&password), Some(c.clone()))
        } else {
            // Same work for unknown users as for known ones.
            let _ = PasswordCheck::Plain([0; 32]).verify(&password);
            (false, None)
        };
        if !ok {
            return unauthorized("the user name or password is wrong", Some(&self.challenge));
        }
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
