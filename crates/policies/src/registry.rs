//! The one table of every policy a flow can hold. Adding a policy means a module implementing
//! [`PolicyFactory`](turnpike_core::PolicyFactory), one line here, and a page in
//! `docs/policies/`.

use turnpike_core::PolicyKind;

/// Every policy, in the order the docs list them.
pub static POLICIES: &[PolicyKind] = &[
    PolicyKind::of::<crate::respond::Return>(),
    PolicyKind::of::<crate::static_body::Static>(),
    PolicyKind::of::<crate::headers::SetHeader>(),
    PolicyKind::of::<crate::headers::RemoveHeader>(),
    PolicyKind::of::<crate::set_cookies::SetCookies>(),
    PolicyKind::of::<crate::auth::basic::BasicAuth>(),
    PolicyKind::of::<crate::auth::api_key::ApiKey>(),
    PolicyKind::of::<crate::auth::jwt::JwtAuth>(),
    PolicyKind::of::<crate::jwt_sign::JwtSign>(),
    PolicyKind::of::<crate::oauth2::AuthServer>(),
    PolicyKind::of::<crate::oauth2::TokenValidator>(),
    PolicyKind::of::<crate::oauth2::OAuth2Client>(),
    PolicyKind::of::<crate::rate_limit::RateLimiter>(),
    PolicyKind::of::<crate::cors::Cors>(),
    PolicyKind::of::<crate::access_control::AccessControl>(),
    PolicyKind::of::<crate::rewriter::Rewriter>(),
    PolicyKind::of::<crate::size_limit::RequestSizeLimit>(),
    PolicyKind::of::<crate::json_protection::JsonProtection>(),
    PolicyKind::of::<crate::graphql_protection::GraphQlProtection>(),
    PolicyKind::of::<crate::json_rpc_protection::JsonRpcProtection>(),
    PolicyKind::of::<turnpike_soap::XmlProtection>(),
    PolicyKind::of::<turnpike_soap::Validator>(),
    PolicyKind::of::<turnpike_soap::Wsdl2OpenApi>(),
    PolicyKind::of::<turnpike_soap::PublishWsdl>(),
    PolicyKind::of::<turnpike_soap::SampleSoapService>(),
    PolicyKind::of::<turnpike_soap::WsSecurity>(),
    PolicyKind::of::<crate::python::Python>(),
    PolicyKind::of::<crate::log::Log>(),
    PolicyKind::of::<crate::template::BodyTemplate>(),
    PolicyKind::of::<crate::prometheus::Prometheus>(),
    PolicyKind::of::<crate::set_body::SetBody>(),
    PolicyKind::of::<crate::beautifier::Beautifier>(),
    PolicyKind::of::<crate::replace::Replace>(),
    PolicyKind::of::<crate::padding_header::PaddingHeader>(),
    PolicyKind::of::<crate::compress::Compress>(),
    PolicyKind::of::<crate::greaser::Greaser>(),
    PolicyKind::of::<crate::form_validation::FormValidation>(),
    PolicyKind::of::<crate::sql_injection_protection::SqlInjectionProtection>(),
    PolicyKind::of::<crate::mcp_protection::McpProtection>(),
    PolicyKind::of::<crate::sse_demo_stream::SseDemoStream>(),
    PolicyKind::of::<crate::web_server::WebServer>(),
    PolicyKind::of::<crate::limit::Limit>(),
    PolicyKind::of::<crate::xml_json::Json2Xml>(),
    PolicyKind::of::<crate::xml_json::Xml2Json>(),
    PolicyKind::of::<turnpike_soap::Transform>(),
    PolicyKind::of::<crate::header_filter::HeaderFilter>(),
    PolicyKind::of::<crate::soap_body::SoapBody>(),
    PolicyKind::of::<crate::throttle::Throttle>(),
    PolicyKind::of::<crate::set_property::SetProperty>(),
    PolicyKind::of::<crate::access_log::AccessLog>(),
    PolicyKind::of::<crate::admin_console::AdminConsole>(),
    PolicyKind::of::<crate::destination::Destination>(),
    PolicyKind::of::<crate::correlation_id::CorrelationId>(),
    PolicyKind::of::<crate::statistics_csv::StatisticsCsv>(),
    PolicyKind::of::<crate::open_telemetry::OpenTelemetry>(),
    PolicyKind::of::<crate::llm_gateway::LlmGateway>(),
    PolicyKind::of::<crate::balancer::Balancer>(),
    PolicyKind::of::<crate::cluster_notification::ClusterNotification>(),
    PolicyKind::of::<crate::counter::Counter>(),
    PolicyKind::of::<crate::call::Call>(),
    PolicyKind::of::<crate::shadowing::Shadowing>(),
];

/// The policy named `name` in YAML.
pub fn find(name: &str) -> Option<&'static PolicyKind> {
    POLICIES.iter().find(|k| k.name == name)
}

/// Every policy name, quoted and comma-separated, for error messages.
pub fn names() -> String {
    POLICIES
        .iter()
        .map(|k| format!("`{}`", k.name))
        .chain(
            [
                "request",
                "response",
                "abort",
                "if",
                "choose",
                "for",
                "webSocket",
            ]
            .iter()
            .map(|n| format!("`{n}`")),
        )
        .collect::<Vec<_>>()
        .join(", ")
}

/// The JSON Schema (draft 2020-12) that every YAML document of a configuration must satisfy,
/// with each policy's settings: `turnpike schema` prints it for editors (yaml-language-server).
pub fn json_schema() -> serde_json::Value {
    let mut generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    let mut alternatives: Vec<serde_json::Value> = POLICIES
        .iter()
        .map(|k| {
            let settings = (k.schema)(&mut generator);
            serde_json::json!({
                "type": "object",
                "properties": { k.name: settings },
                "required": [k.name],
                "additionalProperties": false
            })
        })
        .collect();
    for (name, what) in [
        ("request", "Policies run only on the request."),
        ("response", "Policies run only on the response."),
        (
            "abort",
            "Policies run only on the response to a request the gateway answered with a problem of its own (Membrane's abort flow).",
        ),
    ] {
        alternatives.push(serde_json::json!({
            "type": "object",
            "properties": { name: {
                "description": what,
                "type": "array",
                "items": { "$ref": "#/$defs/PolicyConfig" }
            }},
            "required": [name],
            "additionalProperties": false
        }));
    }
    let flow = serde_json::json!({ "type": "array", "items": { "$ref": "#/$defs/PolicyConfig" } });
    alternatives.push(serde_json::json!({
        "type": "object",
        "properties": { "if": {
            "description": "Runs `flow` when the CEL expression `test` holds, else the `else` flow.",
            "type": "object",
            "properties": { "test": { "type": "string" }, "language": { "type": "string" }, "flow": flow, "else": flow },
            "required": ["test"],
            "additionalProperties": false
        }},
        "required": ["if"],
        "additionalProperties": false
    }));
    alternatives.push(serde_json::json!({
        "type": "object",
        "properties": { "choose": {
            "description": "Runs the flow of the first `when` whose CEL test holds, else `otherwise`.",
            "type": "array",
            "items": { "oneOf": [
                {
                    "type": "object",
                    "properties": { "when": { "type": "string" }, "language": { "type": "string" }, "flow": flow },
                    "required": ["when"],
                    "additionalProperties": false
                },
                {
                    "type": "object",
                    "properties": { "case": {
                        "type": "object",
                        "properties": { "test": { "type": "string" }, "language": { "type": "string" }, "flow": flow },
                        "required": ["test"],
                        "additionalProperties": false
                    }},
                    "required": ["case"],
                    "additionalProperties": false
                },
                {
                    "type": "object",
                    "properties": { "otherwise": flow },
                    "required": ["otherwise"],
                    "additionalProperties": false
                }
            ]}
        }},
        "required": ["choose"],
        "additionalProperties": false
    }));
    alternatives.push(serde_json::json!({
        "type": "object",
        "properties": { "webSocket": {
            "description": "Where the API's WebSocket upgrade requests go instead of its target (`url`, http(s):// or ws(s)://). Frame interceptors (`flow`) are not supported.",
            "type": ["object", "null"],
            "properties": { "url": { "type": "string" }, "flow": { "type": "array", "maxItems": 0 } },
            "additionalProperties": false
        }},
        "required": ["webSocket"],
        "additionalProperties": false
    }));
    alternatives.push(serde_json::json!({
        "type": "object",
        "properties": { "wsdlRewriter": {
            "description": "The address the WSDL a soapProxy publishes shows (behind a load balancer or TLS terminator).",
            "type": "object",
            "properties": {
                "host": { "type": "string" },
                "protocol": { "enum": ["http", "https"] },
                "port": { "type": ["integer", "string"] },
                "path": { "type": "string" }
            },
            "required": ["host"],
            "additionalProperties": false
        }},
        "required": ["wsdlRewriter"],
        "additionalProperties": false
    }));
    let for_settings = generator.subschema_for::<crate::for_loop::ForSettings>();
    alternatives.push(serde_json::json!({
        "type": "object",
        "properties": { "for": for_settings },
        "required": ["for"],
        "additionalProperties": false
    }));
    let mut schema = generator
        .into_root_schema_for::<turnpike_config::Document>()
        .to_value();
    schema["title"] = "Turnpike configuration document".into();
    schema["$defs"]["PolicyConfig"] = serde_json::json!({
        "description": "One policy of a flow: a map with exactly one key, the policy's name.",
        "oneOf": alternatives
    });
    schema
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique() {
        let mut names: Vec<&str> = POLICIES.iter().map(|k| k.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n);
    }

    #[test]
    fn schema_names_every_document_kind_and_policy() {
        let s = json_schema().to_string();
        for key in [
            "\"api\"",
            "\"global\"",
            "\"include\"",
            "\"gateway\"",
            "setHeader",
            "jsonProtection",
            "validateRequests",
            "jsonpath",
            "wsdl2openapi",
            "\"abort\"",
            "\"webSocket\"",
            "\"wsdlRewriter\"",
        ] {
            assert!(s.contains(key), "{key} missing from schema");
        }
    }

    #[test]
    fn the_schema_accepts_a_config_and_refuses_a_misspelled_policy() {
        let schema = json_schema();
        let v = jsonschema::validator_for(&schema).unwrap();
        let good = serde_json::json!({"api": {"port": 2000, "flow": [
            {"setHeader": {"name": "X", "value": "y"}},
            {"request": [{"rateLimiter": {"requestLimit": 1, "requestLimitDuration": "1s"}}]},
            {"abort": [{"setHeader": {"name": "X", "value": "y"}}]},
            {"webSocket": {"url": "ws://127.0.0.1:2"}}
        ], "target": {"url": "http://127.0.0.1:1"}}});
        assert!(
            v.is_valid(&good),
            "{:?}",
            v.iter_errors(&good)
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
        );
        let bad = serde_json::json!({"api": {"port": 2000, "flow": [{"setHeadr": {}}]}});
        assert!(!v.is_valid(&bad));
    }
}
