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
    ("ntlm", "NTLM is Windows-only and connection-bound: authenticate with `basicAuthentication`, `jwtAuth` or mutual TLS"),
    ("statisticsJDBC", "it needs a database: use `statisticsCSV`, `accessLog` or the metrics at `/metrics`"),
    ("login", "the login dialog with one-time passwords is not supported: use an identity provider and `jwtAuth`"),
    ("echo", "answer with `return: {}`, which sends the request's body back"),
    ("membraneMCPServer", "Membrane's own MCP server is not part of Turnpike: proxy an MCP server as a backend"),
    ("APIsJSON", "the catalogue of APIs is the admin API's `/admin/v1/config`"),
    ("webServiceExplorer", "its HTML page is not part of Turnpike: a `soapProxy` or `wsdlPublisher` publishes the WSDL at `?wsdl` for SOAP tools"),
    ("sslLog", "`sslLog` runs in a `sslProxy:` document's `interceptors`, not in a flow"),
];

/// What to use instead of Membrane's policy `name`, when Turnpike does not have it.
pub fn alternative(name: &str) -> Option<&'static str> {
    UNSUPPORTED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, a)| *a)
}
