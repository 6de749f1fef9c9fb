//! Consumers: who calls the APIs. Compiled once from `consumer:` documents into hash indexes by
//! name, API key, user name and JWT subject, so that identifying a caller costs the same with
//! 100,000 consumers as with 100.

use std::collections::HashMap;
use std::sync::Arc;

use turnpike_config::{ConfigErrors, ConsumerConfig, Located};
use turnpike_core::{Chain, Exchange, Outcome};

use crate::auth::password::PasswordCheck;

/// A compiled consumer.
#[derive(Debug)]
pub struct Consumer {
    /// Its name.
    pub name: Arc<str>,
    /// Its groups.
    pub groups: Vec<Arc<str>>,
    /// Its own policies, run once an auth policy identified it.
    pub chain: Arc<Chain>,
}

/// The consumer of the current exchange, kept so that its flow's response phase can run.
#[derive(Debug, Clone)]
pub struct CurrentConsumer(pub Arc<Consumer>);

/// Every consumer, indexed by each kind of credential.
#[derive(Debug, Default)]
pub struct Consumers {
    by_name: HashMap<Arc<str>, Arc<Consumer>>,
    by_api_key: HashMap<String, Arc<Consumer>>,
    by_user: HashMap<String, (Arc<Consumer>, PasswordCheck)>,
    by_subject: HashMap<String, Arc<Consumer>>,
    response_needs_request: bool,
}

impl Consumers {
    /// Compiles the consumers; `compile_flow` compiles each consumer's own flow. Duplicate names
    /// and credentials are errors.
    pub fn compile(
        list: &[Located<ConsumerConfig>],
        mut compile_flow: impl FnMut(&Located<ConsumerConfig>, &mut ConfigErrors) -> Chain,
        errors: &mut ConfigErrors,
    ) -> Self {
        let mut out = Consumers::default();
        for c in list {
            let cfg = &c.value;
            if cfg.name.trim().is_empty() {
                errors.push(c.error("name", "must not be empty"));
                continue;
            }
            if out.by_name.contains_key(cfg.name.as_str()) {
                errors.push(c.error(
                    "name",
                    format!("a consumer named `{}` exists already", cfg.name),
                ));
                continue;
            }
            let consumer = Arc::new(Consumer {
                name: cfg.name.as_str().into(),
                groups: cfg.groups.iter().map(|g| g.as_str().into()).collect(),
                chain: Arc::new(compile_flow(c, errors)),
            });
            if let Some(key) = &cfg.credentials.api_key {
                if out
                    .by_api_key
                    .insert(key.clone(), consumer.clone())
                    .is_some()
                {
                    errors.push(c.error(
                        "credentials.apiKey",
                        "this API key belongs to another consumer too",
                    ));
                }
            }
            if let Some(b) = &cfg.credentials.basic {
                match PasswordCheck::new(&b.password) {
                    Ok(check) => {
                        if out
                            .by_user
                            .insert(b.username.clone(), (consumer.clone(), check))
                            .is_some()
                        {
                            errors.push(c.error(
                                "credentials.basic.username",
                                format!("user `{}` belongs to another consumer too", b.username),
                            ));
                        }
                    }
                    Err(m) => errors.push(c.error("credentials.basic.password", m)),
                }
            }
            if let Some(j) = &cfg.credentials.jwt {
                if out
                    .by_subject
                    .insert(j.subject.clone(), consumer.clone())
                    .is_some()
                {
                    errors.push(c.error(
                        "credentials.jwt.subject",
                        format!("subject `{}` belongs to another consumer too", j.subject),
                    ));
                }
            }
            out.response_needs_request |= consumer.chain.response_needs_request();
            out.by_name.insert(consumer.name.clone(), consumer);
        }
        out
    }

    /// The consumer with this name.
    pub fn by_name(&self, name: &str) -> Option<&Arc<Consumer>> {
        self.by_name.get(name)
    }

    /// The consumer owning this API key.
    pub fn by_api_key(&self, key: &str) -> Option<&Arc<Consumer>> {
        self.by_api_key.get(key)
    }

    /// The consumer owning this user name, with its password check.
    pub fn by_user(&self, user: &str) -> Option<&(Arc<Consumer>, PasswordCheck)> {
        self.by_user.get(user)
    }

    /// The consumer whose JWT subject this is.
    pub fn by_subject(&self, sub: &str) -> Option<&Arc<Consumer>> {
        self.by_subject.get(sub)
    }

    /// True when some consumer's flow reads the request in its response phase.
    pub fn response_needs_request(&self) -> bool {
        self.response_needs_request
    }

    /// Number of consumers.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// True when there is no consumer.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// The consumers the compile stage shares with the policies (none when it shares none: unit
/// tests, and the flows of consumers themselves).
pub fn shared(ctx: &turnpike_core::CompileContext<'_>) -> Arc<Consumers> {
    ctx.get::<Arc<Consumers>>()
        .cloned()
        .unwrap_or_else(|| Arc::new(Consumers::default()))
}

/// Runs the request phase of an identified consumer's own flow and remembers the consumer for
/// the response phase.
pub(crate) fn enter(ex: &mut Exchange, consumer: &Arc<Consumer>) -> Outcome {
    ex.extensions.insert(CurrentConsumer(consumer.clone()));
    crate::nested::request_from(ex, consumer.chain.clone(), 0)
}

/// Runs the response phase of the consumer's flow, if a consumer was identified.
pub(crate) fn leave(ex: &mut Exchange) -> Outcome {
    let Some(CurrentConsumer(c)) = ex.extensions.get::<CurrentConsumer>().cloned() else {
        return Outcome::Continue;
    };
    crate::nested::response_below(ex, c.chain.clone(), usize::MAX)
}
