//! `llmGateway`: Membrane's gateway for the APIs of large language models (OpenAI, Anthropic's
//! Claude, Google's Gemini). It shares one provider key between clients (`apiKey`),
//! authenticates clients by keys of their own and counts their tokens against quotas
//! (`simpleStore`), limits each request's input and output tokens and its model (`policies`),
//! and sets the system prompt (`systemPrompt`). The errors it answers with are in the
//! provider's own JSON error format (clients of these APIs read that), not problem+json.
//!
//! Only a POST with model input (see [`providers::Api::is_model`]) has its body read into
//! memory, within the gateway's body size limit; other requests stream through with their key
//! handled. Responses are never held back: their usage is read as they stream ([`usage`]).

mod estimate;
mod providers;
mod quota;
mod settings;
mod usage;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderValue, Method};
use turnpike_core::body::{BodyError, BodyTooLarge};
use turnpike_core::policy::SecretFields;
use turnpike_core::properties::Properties;
use turnpike_core::{problems, Body, BodyInspected, CompileContext, CompileError, Exchange};
use turnpike_core::{Outcome, Policy, PolicyFactory, Problem, Resume, Wait};

use crate::err;
pub use providers::{Api, Provider};
pub use settings::{
    Action, LlmGatewaySettings, PoliciesSettings, ProviderSettings, SimpleStoreSettings,
    SystemPromptSettings, UserSettings,
};

use providers::Failure;
use quota::Store;
use usage::{Meter, Metered};

/// How long reading a request body may take in all (pauses are bounded by the gateway's body
/// read timeout).
const READ_TIMEOUT: Duration = Duration::from_secs(300);

/// The exchange property that names the `simpleStore` user (Membrane's `membrane.ai.user`).
const USER_PROPERTY: &str = "membrane.ai.user";

/// `policies`, compiled.
#[derive(Debug, Default)]
struct Limits {
    max_input: i64,
    max_output: i64,
    models: Option<Vec<String>>,
}

/// `systemPrompt`, compiled.
#[derive(Debug)]
struct SystemPrompt {
    action: Action,
    content: String,
}

/// What every request shares: the compiled settings and the quota store.
#[derive(Debug)]
struct Shared {
    provider: Provider,
    api_key: Option<HeaderValue>,
    limits: Option<Limits>,
    system_prompt: Option<SystemPrompt>,
    store: Option<Arc<Store>>,
}

/// The compiled `llmGateway` policy (see the module doc).
#[derive(Debug)]
pub struct LlmGateway {
    shared: Arc<Shared>,
}

/// Put into the exchange for a request of a `simpleStore` user, so that the response phase
/// counts the response's usage.
#[derive(Clone)]
struct Counted {
    store: Arc<Store>,
    user: usize,
    api: Api,
}

impl PolicyFactory for LlmGateway {
    const NAME: &'static str = "llmGateway";
    type Settings = LlmGatewaySettings;

    /// Compiles the policy. Load errors: no provider or more than one, an `apiKey` that still
    /// holds Membrane's `<<`…`>>` replacement marker or cannot be a header value, negative
    /// limits, two users with the same key.
    fn compile(c: LlmGatewaySettings, _: &CompileContext<'_>) -> Result<Self, CompileError> {
        let providers: Vec<Provider> = [
            (c.openai.is_some(), Provider::OpenAi),
            (c.claude.is_some(), Provider::Claude),
            (c.google.is_some(), Provider::Google),
        ]
        .into_iter()
        .filter_map(|(set, p)| set.then_some(p))
        .collect();
        let provider = match providers.as_slice() {
            [p] => *p,
            [] => return Err(err("", "needs a provider: `openai`, `claude` or `google`")),
            _ => {
                return Err(err(
                    "",
                    "has more than one provider: name one of `openai`, `claude` and `google`",
                ))
            }
        };
        let api_key = match &c.api_key {
            Some(k) if k.contains("<<") && k.contains(">>") => {
                return Err(err(
                    "apiKey",
                    format!("The configuration contains the replacement marker {k}. Substitute it with the API key of the model."),
                ))
            }
            Some(k) => Some(
                provider
                    .key_value(k)
                    .map_err(|_| err("apiKey", "is not a valid header value"))?,
            ),
            None => None,
        };
        let limits = match c.policies {
            Some(p) => {
                let max_input = p.max_input_tokens.unwrap_or(0);
                if max_input < 0 {
                    return Err(err(
                        "policies.maxInputTokens",
                        "maxInputTokens must be >= 0",
                    ));
                }
                let max_output = p.max_output_tokens.unwrap_or(0);
                if max_output < 0 {
                    return Err(err(
                        "policies.maxOutputTokens",
                        "maxOutputTokens must be >= 0",
                    ));
                }
                Some(Limits {
                    max_input,
                    max_output,
                    models: p.models,
                })
            }
            None => None,
        };
        let system_prompt = c.system_prompt.map(|s| SystemPrompt {
            action: s.action.unwrap_or_default(),
            content: s.content.unwrap_or_default(),
        });
        let store = match &c.simple_store {
            Some(s) => Some(Arc::new(Store::new(s)?)),
            None => None,
        };
        Ok(LlmGateway {
            shared: Arc::new(Shared {
                provider,
                api_key,
                limits,
                system_prompt,
                store,
            }),
        })
    }
}

/// True for a JSON media type (`application/json`, `application/…+json`).
fn is_json(headers: &http::HeaderMap) -> bool {
    let Some(ct) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// The problem for a request body that could not be read.
fn read_problem(e: &BodyError) -> Problem {
    if e.downcast_ref::<BodyTooLarge>().is_some() {
        Problem::new(&problems::BODY_TOO_LARGE).with_detail("the body exceeds the size limit")
    } else {
        Problem::new(&problems::BAD_BODY).with_detail(e.to_string())
    }
}

/// Reads a streamed body into memory (it is already bounded by the gateway's size limit and
/// body read timeout).
async fn collect(mut body: Body) -> Result<Bytes, BodyError> {
    use http_body::Body as _;
    let mut buf = bytes::BytesMut::new();
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
    {
        if let Ok(data) = frame?.into_data() {
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf.freeze())
}

impl Shared {
    fn respond(&self, f: &Failure<'_>) -> Outcome {
        Outcome::Respond(f.response(self.provider))
    }

    /// The policies, the system prompt and the quota for a model request whose body is
    /// `bytes`; the body is then replaced by the changed JSON.
    fn model_request(&self, ex: &mut Exchange, bytes: &[u8], user: Option<usize>) -> Outcome {
        let api = self.provider.api(ex.request.uri.path());
        let mut json = match serde_json::from_slice::<serde_json::Value>(bytes) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => {
                return self.respond(&Failure::Parse("Cannot parse input as JSON message."));
            }
        };
        providers::prepare(api, &mut json);
        if let Some(l) = &self.limits {
            let requested = providers::requested_max_output(api, &json);
            let estimated = estimate::input_tokens(api, &json);
            if l.max_output > 0 && (requested <= 0 || requested > l.max_output) {
                tracing::debug!(
                    "llmGateway: output limited to {} tokens (requested {requested})",
                    l.max_output
                );
                providers::set_max_output(api, &mut json, l.max_output);
            }
            if l.max_input != 0 && estimated > l.max_input {
                return self.respond(&Failure::InputTooLong {
                    max: l.max_input,
                    estimated,
                });
            }
            if let Some(models) = &l.models {
                let model = providers::model(api, &json, ex.request.uri.path());
                if !model.as_ref().is_some_and(|m| models.contains(m)) {
                    return self.respond(&Failure::ModelNotAllowed {
                        model: model.as_deref(),
                        allowed: models,
                    });
                }
            }
        }
        if let Some(sp) = &self.system_prompt {
            let existing = providers::system_prompt(api, &json);
            match sp.action {
                Action::Overwrite => {
                    providers::set_system_prompts(api, &mut json, &[sp.content.as_str()])
                }
                Action::Prepend => providers::set_system_prompts(
                    api,
                    &mut json,
                    &[sp.content.as_str(), existing.as_str()],
                ),
                Action::Append => providers::set_system_prompts(
                    api,
                    &mut json,
                    &[existing.as_str(), sp.content.as_str()],
                ),
                Action::Remove => providers::remove_system_prompt(api, &mut json),
            }
        }
        if let (Some(store), Some(user)) = (&self.store, user) {
            let input = estimate::input_tokens(api, &json);
            let max_output = self.limits.as_ref().map_or(0, |l| l.max_output);
            let output = quota::effective_max_output(
                providers::requested_max_output(api, &json),
                max_output,
            );
            let now = Instant::now();
            let remaining = store.check(user, input + output, now);
            if remaining <= 0 {
                tracing::info!(
                    "llmGateway: token limit of {} exceeded: remaining {remaining}, input {input}, max output {output}",
                    store.name(user)
                );
                return self.respond(&Failure::Quota {
                    required: input + output,
                    remaining,
                    reset_seconds: store.seconds_until_reset(now),
                });
            }
        }
        let body = match serde_json::to_vec(&json) {
            Ok(b) => b,
            Err(_) => return Outcome::Reject(Problem::new(&problems::INTERNAL)),
        };
        ex.request_body = Body::full(body);
        ex.request.headers.remove(header::CONTENT_LENGTH);
        ex.request.headers.remove(header::TRANSFER_ENCODING);
        turnpike_core::json::forget_request_json(ex);
        ex.extensions.remove::<BodyInspected>();
        Outcome::Continue
    }
}

impl Policy for LlmGateway {
    fn name(&self) -> &'static str {
        "llmGateway"
    }

    /// The provider's key header, which carries the client's key.
    fn secret_fields(&self) -> SecretFields {
        SecretFields {
            headers: vec![self.shared.provider.key_header()],
            query: Vec::new(),
        }
    }

    /// The response phase reads what the request phase left in the exchange, not the request.
    fn response_needs_request(&self) -> bool {
        false
    }

    /// Authenticates the `simpleStore` user (401), puts `apiKey` in the provider's header, and
    /// for a POST with model input reads the body (waiting for it when it still streams) and
    /// applies `policies` (400), `systemPrompt` and the user's quota (429) to it. Answers
    /// failures in the provider's error format.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        let g = &self.shared;
        let api = g.provider.api(ex.request.uri.path());
        let user = match &g.store {
            Some(store) => match store.user(g.provider.client_key(&ex.request.headers)) {
                Some(u) => {
                    let name = serde_json::Value::String(store.name(u).to_owned());
                    match ex.extensions.get_mut::<Properties>() {
                        Some(p) => p.set(USER_PROPERTY, name),
                        None => {
                            let mut p = Properties::default();
                            p.set(USER_PROPERTY, name);
                            ex.extensions.insert(p);
                        }
                    }
                    ex.extensions.insert(Counted {
                        store: Arc::clone(store),
                        user: u,
                        api,
                    });
                    Some(u)
                }
                None => return g.respond(&Failure::Auth),
            },
            None => None,
        };
        if let Some(key) = &g.api_key {
            g.provider.set_key(&mut ex.request.headers, key);
        }
        if g.provider == Provider::Claude || g.store.is_some() {
            // Responses are read for their usage: they must not be compressed.
            ex.request.headers.insert(
                header::ACCEPT_ENCODING,
                HeaderValue::from_static("identity"),
            );
        }
        if ex.request.method != Method::POST || !api.is_model() {
            return Outcome::Continue;
        }
        if !is_json(&ex.request.headers) {
            return g.respond(&Failure::Parse("Request is not JSON."));
        }
        match &ex.request_body {
            Body::Empty => return g.model_request(ex, b"", user),
            Body::Full(b) => {
                let b = b.clone().unwrap_or_default();
                return g.model_request(ex, &b, user);
            }
            _ => {}
        }
        let body = std::mem::take(&mut ex.request_body);
        let g = Arc::clone(&self.shared);
        Outcome::Wait(Wait::new(
            async move {
                let read = collect(body).await;
                Box::new(move |ex: &mut Exchange| match read {
                    Ok(bytes) => g.model_request(ex, &bytes, user),
                    Err(e) => Outcome::Reject(read_problem(&e)),
                }) as Resume
            },
            READ_TIMEOUT,
            |_| Outcome::Reject(Problem::new(&problems::BODY_TIMEOUT)),
        ))
    }

    /// For a request of a `simpleStore` user, reads the usage of a JSON or event-stream
    /// response as it streams to the client and counts it against the user's quota.
    fn on_response(&self, ex: &mut Exchange) -> Outcome {
        let Some(c) = ex.extensions.get::<Counted>().cloned() else {
            return Outcome::Continue;
        };
        let Some(store) = &self.shared.store else {
            return Outcome::Continue;
        };
        if !Arc::ptr_eq(store, &c.store) {
            return Outcome::Continue;
        }
        let Some(res) = ex.response.as_mut() else {
            return Outcome::Continue;
        };
        let encoded = res
            .headers()
            .get(header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| !v.trim().eq_ignore_ascii_case("identity"));
        if encoded {
            tracing::debug!("llmGateway: a compressed response's usage is not read");
            return Outcome::Continue;
        }
        let sse = res
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.trim_start()
                    .to_ascii_lowercase()
                    .starts_with("text/event-stream")
            });
        if !sse && !is_json(res.headers()) {
            return Outcome::Continue;
        }
        let length = res
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let body = std::mem::take(res.body_mut());
        let meter = Meter::new(c.store, c.user, c.api, sse, length);
        *res.body_mut() = Metered::wrap(body, meter);
        Outcome::Continue
    }
}

#[cfg(test)]
mod tests;
