//! Membrane's policies that Turnpike does not have, each with what to use instead: the load
//! error for such a flow entry names it (see `docs/membrane.md`).

/// Membrane's policies without a Turnpike policy of the same name, and the alternative.
pub const UNSUPPORTED: &[(&str, &str)] = &[
    ("groovy", "scripts cannot run in Turnpike: use `if`/`choose` conditions (CEL), templates, or a `python` policy"),
    ("javascript", "scripts cannot run in Turnpike: use `if`/`choose` conditions (CEL), templates, or a `python` policy"),
    ("spel", "SpEL cannot run in Turnpike: use `if`/`choose` conditions (CEL) or templates"),
    ("openapiValidator", "deploy the API from `openapi:` with `validateRequests: yes`"),
    ("rest2Soap", "use `wsdl2openapi`"),
    ("oauth2Resource2", "the browser login of the authorization code flow is not supported: use `jwtAuth` with the provider's JSON Web Key Set, or `tokenValidator`"),
    ("jwtSign", "not supported"),
    ("webSocket", "WebSocket upgrades are proxied without a policy"),
    ("ntlm", "not supported"),
];

/// What to use instead of Membrane's policy `name`, when Turnpike does not have it.
pub fn alternative(name: &str) -> Option<&'static str> {
    UNSUPPORTED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, a)| *a)
}
