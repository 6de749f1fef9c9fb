//! What a policy is to the compile stage: a name, the phases it may act in, a settings type
//! (with its JSON Schema) and a compile function. Each policy module implements
//! [`PolicyFactory`] once; the registry (`turnpike_policies::registry`) lists them, and the flow
//! compiler, the JSON Schema and the docs test read that one table.

use std::path::Path;

use crate::policy::Policy;
pub use crate::settings::CompileError;
use crate::template::TemplateScope;

/// A policy as the configuration names it: implemented by each policy's compiled type.
pub trait PolicyFactory: Policy + Sized {
    /// The policy's name in YAML (`setHeader`).
    const NAME: &'static str;
    /// The phases the policy acts in. A policy placed in a `request:` or `response:` flow it
    /// does not act in is a load error.
    const PHASES: Phases = Phases::BOTH;
    /// True when the policy may only stand in an API's top-level flow (it converts both ways).
    const TOP_LEVEL_ONLY: bool = false;
    /// True for authentication policies: they cannot stand in a consumer's flow, which runs
    /// once authentication identified the consumer.
    const AUTHENTICATES: bool = false;
    /// True when the policy answers every request it sees, so that an API whose flow has it on
    /// the request path needs no target.
    const ANSWERS: bool = false;
    /// True when the policy checks SOAP messages: an API whose flow has it answers SOAP
    /// requests with SOAP faults (and others with problem+json).
    const SOAP: bool = false;
    /// The settings as written under the policy's name (`deny_unknown_fields`, documented
    /// fields: they become the JSON Schema).
    type Settings: serde::de::DeserializeOwned + schemars::JsonSchema;

    /// Compiles checked settings; called once per load for each place the policy stands.
    fn compile(settings: Self::Settings, ctx: &CompileContext<'_>) -> Result<Self, CompileError>;
}

/// The phases a policy acts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phases {
    /// Acts on requests.
    pub request: bool,
    /// Acts on responses.
    pub response: bool,
}

impl Phases {
    /// Requests and responses.
    pub const BOTH: Phases = Phases {
        request: true,
        response: true,
    };
    /// Requests only.
    pub const REQUEST: Phases = Phases {
        request: true,
        response: false,
    };
    /// Responses only.
    pub const RESPONSE: Phases = Phases {
        request: false,
        response: true,
    };
}

/// What a policy is compiled against.
#[derive(Clone, Copy)]
pub struct CompileContext<'a> {
    /// What templates may refer to (the route's path parameters).
    pub scope: &'a TemplateScope,
    /// True while compiling a consumer's own flow (`rateLimiter` counts per consumer there).
    pub in_consumer_flow: bool,
    /// The folder of the config file the flow is in (relative file paths start there).
    pub base_dir: &'a Path,
    /// The API's path prefix (`""` when it matches every path or a template/regex), for
    /// policies that route below it (`wsdl2openapi`).
    pub path_prefix: &'a str,
    /// What the compile stage shares with the policies by type: the consumers, the WSDL of the
    /// `soapProxy` the flow belongs to.
    pub shared: &'a http::Extensions,
    /// Where the policy stands in the configuration (`api orders|flow[2].rateLimiter`): stable
    /// across reloads while the flow keeps its shape, so that state (rate limit counters) can
    /// outlive a reload of an unchanged policy.
    pub site: &'a str,
}

impl CompileContext<'static> {
    /// A context outside any configuration (tools, unit tests): no path parameters, files
    /// relative to the current folder, no path prefix, nothing shared.
    pub fn standalone() -> Self {
        static SCOPE: std::sync::OnceLock<TemplateScope> = std::sync::OnceLock::new();
        static SHARED: std::sync::OnceLock<http::Extensions> = std::sync::OnceLock::new();
        CompileContext {
            scope: SCOPE.get_or_init(TemplateScope::default),
            in_consumer_flow: false,
            base_dir: Path::new("."),
            path_prefix: "",
            shared: SHARED.get_or_init(http::Extensions::new),
            site: "",
        }
    }
}

impl CompileContext<'_> {
    /// A shared value of type `T`, if the compile stage put one in.
    pub fn get<T: Clone + Send + Sync + 'static>(&self) -> Option<&T> {
        self.shared.get::<T>()
    }
}

/// A registry entry: a [`PolicyFactory`] with its settings parser, type-erased so that one
/// table can list every policy.
pub struct PolicyKind {
    /// The policy's name in YAML.
    pub name: &'static str,
    /// See [`PolicyFactory::PHASES`].
    pub phases: Phases,
    /// See [`PolicyFactory::TOP_LEVEL_ONLY`].
    pub top_level_only: bool,
    /// See [`PolicyFactory::AUTHENTICATES`].
    pub authenticates: bool,
    /// See [`PolicyFactory::ANSWERS`].
    pub answers: bool,
    /// See [`PolicyFactory::SOAP`].
    pub soap: bool,
    /// The JSON Schema of the settings (a reference into the generator's definitions).
    pub schema: fn(&mut schemars::SchemaGenerator) -> schemars::Schema,
    /// Parses the settings (`parse` reports every error with its key) and compiles them.
    pub compile: CompileFn,
}

/// Parses and compiles one policy's settings, reporting every error with its key.
pub type CompileFn =
    fn(serde_json::Value, &CompileContext<'_>) -> Result<Box<dyn Policy>, Vec<CompileError>>;

impl std::fmt::Debug for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyKind")
            .field("name", &self.name)
            .finish()
    }
}

impl PolicyKind {
    /// The registry entry of `P`.
    pub const fn of<P: PolicyFactory>() -> PolicyKind {
        PolicyKind {
            name: P::NAME,
            phases: P::PHASES,
            top_level_only: P::TOP_LEVEL_ONLY,
            authenticates: P::AUTHENTICATES,
            answers: P::ANSWERS,
            soap: P::SOAP,
            schema: schema_of::<P::Settings>,
            compile: compile_as::<P>,
        }
    }
}

fn schema_of<S: schemars::JsonSchema>(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
    g.subschema_for::<S>()
}

fn compile_as<P: PolicyFactory>(
    settings: serde_json::Value,
    ctx: &CompileContext<'_>,
) -> Result<Box<dyn Policy>, Vec<CompileError>> {
    // Settings left after the bad ones were taken out are still compiled, so that their
    // other errors (a bad template, conflicting settings) show in the same run.
    let (settings, mut errors) = crate::settings::parse_recovering::<P::Settings>(settings);
    let compiled = settings.map(|s| P::compile(s, ctx));
    match compiled {
        Some(Ok(p)) if errors.is_empty() => Ok(Box::new(p) as Box<dyn Policy>),
        Some(Err(e)) => {
            errors.push(e);
            Err(errors)
        }
        _ => Err(errors),
    }
}
