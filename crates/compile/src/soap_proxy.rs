//! `soapProxy:` documents: the API a WSDL's service port stands for.

use std::sync::Arc;

use turnpike_config::{
    ApiConfig, ConfigErrors, Located, PathConfig, SoapProxyConfig, TargetConfig,
};
use turnpike_soap::Wsdl;

/// Turns a `soapProxy:` document into the API it stands for: path and target from the WSDL's
/// service address (unless given), named after the service. Returns the API and its WSDL.
pub(crate) fn soap_proxy_api(
    located: &Located<SoapProxyConfig>,
    errors: &mut ConfigErrors,
) -> Option<(Located<ApiConfig>, Arc<Wsdl>)> {
    let p = &located.value;
    let location = turnpike_soap::Location::from_config(&p.wsdl, crate::base_dir(located));
    let wsdl = match Wsdl::load(&location) {
        Ok(w) => Arc::new(w),
        Err(m) => {
            errors.push(located.error("wsdl", m));
            return None;
        }
    };
    let port = match wsdl.port(p.service_name.as_deref(), p.port_name.as_deref()) {
        Ok(port) => port,
        Err(m) => {
            let key = if p.port_name.is_some() {
                "portName"
            } else {
                "wsdl"
            };
            errors.push(located.error(key, m));
            return None;
        }
    };
    let path = p
        .path
        .as_ref()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| turnpike_soap::publish::address_path(&port.address).to_owned());
    let target = match &p.target {
        Some(t) => t.clone(),
        None => {
            let scheme_rest = ["http://", "https://"]
                .iter()
                .find_map(|sch| port.address.strip_prefix(sch).map(|r| (sch, r)));
            let Some((scheme, rest)) = scheme_rest else {
                errors.push(located.error(
                    "wsdl",
                    format!(
                        "the service address `{}` is not an http(s):// URL; set `target:`",
                        port.address
                    ),
                ));
                return None;
            };
            let authority = rest.split('/').next().unwrap_or(rest);
            TargetConfig {
                url: Some(format!("{scheme}{authority}")),
                ..TargetConfig::default()
            }
        }
    };
    let name = p
        .name
        .clone()
        .or_else(|| wsdl.service_of(port).map(str::to_owned));
    let api = ApiConfig {
        name,
        description: p.description.clone(),
        port: p.port,
        ip: p.ip,
        host: p.host.clone(),
        method: None,
        path: Some(PathConfig {
            uri: path,
            is_reg_exp: Default::default(),
        }),
        flow: p.flow.clone(),
        target: Some(target),
        ssl: p.ssl.clone(),
        h2c: p.h2c,
        openapi: Vec::new(),
        specs: Vec::new(),
        operations: Default::default(),
        routes: Vec::new(),
        test: None,
        language: None,
        xml_config: None,
    };
    Some((
        Located {
            value: api,
            origin: Arc::clone(&located.origin),
            key: located.key.clone(),
        },
        wsdl,
    ))
}

/// Membrane's `wsdlRewriter` entry of a `soapProxy`'s flow (`protocol`, `host`, `port`,
/// `path`): the address its published WSDL shows. `https` is the default protocol when the
/// listener has TLS. Errors name the setting; outside a `soapProxy` the entry is an error.
pub(crate) fn wsdl_rewriter(
    located: &Located<ApiConfig>,
    is_soap_proxy: bool,
    errors: &mut ConfigErrors,
) -> Option<turnpike_soap::PublicAddress> {
    let mut entries = located
        .value
        .flow
        .iter()
        .enumerate()
        .filter(|(_, p)| p.name == "wsdlRewriter");
    let (i, p) = entries.next()?;
    let at = format!("flow[{i}].wsdlRewriter");
    if let Some((j, _)) = entries.next() {
        errors.push(located.error(
            &format!("flow[{j}].wsdlRewriter"),
            "`wsdlRewriter` may stand only once in a flow",
        ));
    }
    if !is_soap_proxy {
        errors.push(located.error(
            &at,
            "`wsdlRewriter` sets the address in the WSDL a `soapProxy` publishes: use it in a `soapProxy` (see docs/membrane.md)",
        ));
        return None;
    }
    let s = &p.settings;
    let Some(o) = s.as_object() else {
        errors.push(located.error(
            &at,
            "expected a map with `host` (and `protocol`, `port`, `path`)",
        ));
        return None;
    };
    let before = errors.0.len();
    for k in o
        .keys()
        .filter(|k| !["protocol", "host", "port", "path"].contains(&k.as_str()))
    {
        errors.push(located.error(
            &format!("{at}.{k}"),
            format!("unknown field `{k}`, expected `protocol`, `host`, `port` or `path`"),
        ));
    }
    let text = |k: &str, errors: &mut ConfigErrors| match o.get(k) {
        None => None,
        Some(v) => match v.as_str() {
            Some(t) => Some(t.trim().to_owned()),
            None => {
                errors.push(located.error(&format!("{at}.{k}"), "expected a string"));
                None
            }
        },
    };
    let protocol = text("protocol", errors).unwrap_or_else(|| {
        if located.value.ssl.is_some() {
            "https"
        } else {
            "http"
        }
        .to_owned()
    });
    let protocol = protocol.to_ascii_lowercase();
    if protocol != "http" && protocol != "https" {
        errors.push(located.error(&format!("{at}.protocol"), "`http` or `https`"));
    }
    let host = text("host", errors).unwrap_or_default();
    if host.is_empty() || host.contains(|c: char| c.is_whitespace() || "/?#@\\\"'<>".contains(c)) {
        errors.push(located.error(
            &format!("{at}.host"),
            "a host name or IP address is required",
        ));
    }
    let port = match o.get("port") {
        None => None,
        Some(v) => match v
            .as_u64()
            .or_else(|| v.as_str().and_then(|t| t.trim().parse().ok()))
        {
            Some(n) if (1..=65535).contains(&n) => Some(n),
            _ => {
                errors.push(located.error(&format!("{at}.port"), "a port number, 1 to 65535"));
                None
            }
        },
    };
    let path = text("path", errors);
    if path
        .as_deref()
        .is_some_and(|p| !p.starts_with('/') || p.contains(['?', '#']))
    {
        errors.push(located.error(&format!("{at}.path"), "a path starting with `/`"));
    }
    if errors.0.len() > before {
        return None;
    }
    let default_port = if protocol == "https" { 443 } else { 80 };
    let origin = match port {
        Some(p) if p != default_port => format!("{protocol}://{host}:{p}"),
        _ => format!("{protocol}://{host}"),
    };
    Some(turnpike_soap::PublicAddress { origin, path })
}
