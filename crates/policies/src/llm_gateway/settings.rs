//! The settings of `llmGateway`, in the shape of Membrane's YAML.

use schemars::JsonSchema;
use serde::Deserialize;

/// `llmGateway`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LlmGatewaySettings {
    /// The provider's API key: it replaces whatever key the client sent (in the provider's
    /// header). Without it the client's key is forwarded.
    #[serde(default)]
    pub api_key: Option<String>,
    /// The provider is OpenAI (Responses and Chat Completions APIs). Exactly one provider.
    #[serde(default)]
    pub openai: Option<ProviderSettings>,
    /// The provider is Anthropic (Messages API). Exactly one provider.
    #[serde(default)]
    pub claude: Option<ProviderSettings>,
    /// The provider is Google Gemini (`generateContent`). Exactly one provider.
    #[serde(default)]
    pub google: Option<ProviderSettings>,
    /// Limits per request: input and output tokens, models.
    #[serde(default)]
    pub policies: Option<PoliciesSettings>,
    /// Sets, extends or removes the request's system prompt.
    #[serde(default)]
    pub system_prompt: Option<SystemPromptSettings>,
    /// Users who authenticate with keys of their own, each with a token quota per period.
    #[serde(default)]
    pub simple_store: Option<SimpleStoreSettings>,
}

/// A provider: it has no settings (`openai: {}`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderSettings {}

/// `policies`: limits each request must keep.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PoliciesSettings {
    /// The most input tokens a request may have, as estimated from its text (0: no limit).
    #[serde(default)]
    pub max_input_tokens: Option<i64>,
    /// The most output tokens a request may ask for; written into the request when it asks
    /// for more or does not say (0: no limit).
    #[serde(default)]
    pub max_output_tokens: Option<i64>,
    /// The models requests may name (exact, case-sensitive); without it any model.
    #[serde(default)]
    pub models: Option<Vec<String>>,
}

/// `systemPrompt`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SystemPromptSettings {
    /// What to do with the request's system prompt (default `OVERWRITE`).
    #[serde(default)]
    pub action: Option<Action>,
    /// The prompt to set, prepend or append (default empty).
    #[serde(default)]
    pub content: Option<String>,
}

/// What `systemPrompt` does with the request's system prompt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum Action {
    /// Replaces it with `content`.
    #[default]
    #[serde(rename = "OVERWRITE", alias = "overwrite", alias = "Overwrite")]
    Overwrite,
    /// Puts `content` after it.
    #[serde(rename = "APPEND", alias = "append", alias = "Append")]
    Append,
    /// Puts `content` before it.
    #[serde(rename = "PREPEND", alias = "prepend", alias = "Prepend")]
    Prepend,
    /// Removes it.
    #[serde(rename = "REMOVE", alias = "remove", alias = "Remove")]
    Remove,
}

/// `simpleStore`: users and their token quotas, kept in memory.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SimpleStoreSettings {
    /// Seconds after which every user's used tokens start again from 0 (default 60).
    #[serde(default)]
    pub limit_reset_period: Option<u64>,
    /// The users.
    #[serde(default)]
    pub users: Vec<UserSettings>,
}

/// A user of `simpleStore`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UserSettings {
    /// The user's name (in the log of usage).
    pub name: String,
    /// The key the user sends to the gateway, where the provider's key goes.
    pub api_key: String,
    /// Tokens the user may use per period (0: no limit).
    #[serde(default)]
    pub tokens: Option<u64>,
}
