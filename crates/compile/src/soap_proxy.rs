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
