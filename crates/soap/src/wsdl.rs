//! WSDL 1.1 documents read at load time: services, SOAP 1.1/1.2 ports and bindings, operations
//! with their messages, and the XML Schemas of `wsdl:types` (compiled by [`crate::schema`]).

use std::collections::HashMap;
use std::sync::Arc;

use crate::fetch::Location;
pub use crate::names::{QName, SoapVersion, WSDL_NS, WSDL_SOAP11_NS, WSDL_SOAP12_NS, XSD_NS};
use crate::schema::SchemaSet;
pub use crate::service::{MessageSpec, Operation, Part, Port, Service, Style};
use crate::xml::{self, Element};

/// A loaded WSDL.
#[derive(Debug)]
pub struct Wsdl {
    /// Where it was read from.
    pub location: Location,
    /// Its text, as read (for publishing at `?wsdl`).
    pub text: String,
    /// `targetNamespace` of the definitions.
    pub target_namespace: String,
    /// Its services with their SOAP ports.
    pub services: Vec<Service>,
    /// Every XML Schema document it uses (inline and imported), for type information.
    pub schemas: Vec<Element>,
    /// The compiled schemas (libxml2), with synthetic declarations for rpc wrappers.
    pub schema_set: Arc<SchemaSet>,
    /// The local files read: the WSDL, imported WSDLs and schema documents (for `--watch`).
    pub files: Vec<std::path::PathBuf>,
}

#[derive(Default)]
struct Defs {
    tns_messages: HashMap<QName, Element>,
    port_types: HashMap<QName, Element>,
    bindings: HashMap<QName, Element>,
    services: Vec<Element>,
    inline_schemas: Vec<(Element, Location)>,
}

impl Wsdl {
    /// Reads and compiles the WSDL at `location` (with its imports and schemas).
    pub fn load(location: &Location) -> Result<Wsdl, String> {
        let bytes = location.read()?;
        let text = String::from_utf8(bytes)
            .map_err(|_| format!("{location}: the WSDL is not UTF-8 text"))?;
        let root = xml::parse(text.as_bytes()).map_err(|e| format!("{location}: {e}"))?;
        if !root.is(WSDL_NS, "definitions") {
            return Err(format!(
                "{location}: not a WSDL 1.1 document (the root is `{}`)",
                root.qualified_name()
            ));
        }
        let target_namespace = root.attr("targetNamespace").unwrap_or("").to_owned();
        let mut defs = Defs::default();
        let mut seen = vec![location.clone()];
        collect(&root, location, &mut defs, &mut seen, 0)?;
        let services = build_services(&defs).map_err(|e| format!("{location}: {e}"))?;
        let (schema_set, schemas, schema_files) = SchemaSet::build(&defs.inline_schemas, &services)
            .map_err(|e| format!("{location}: {e}"))?;
        Ok(Wsdl {
            location: location.clone(),
            text,
            target_namespace,
            services,
            schemas,
            schema_set: Arc::new(schema_set),
            files: seen
                .iter()
                .chain(schema_files.iter())
                .filter_map(|l| match l {
                    Location::File(p) => Some(p.clone()),
                    Location::Url(_) => None,
                })
                .collect(),
        })
    }

    /// The ports to use: those of the service named `service` (every service when `None`).
    pub fn ports(&self, service: Option<&str>) -> Result<Vec<&Port>, String> {
        let ports: Vec<&Port> = self
            .services
            .iter()
            .filter(|s| service.is_none_or(|n| s.name == n))
            .flat_map(|s| s.ports.iter())
            .collect();
        if ports.is_empty() {
            return Err(match service {
                Some(n) => format!(
                    "the WSDL has no SOAP service named `{n}` (it has: {})",
                    self.services
                        .iter()
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => "the WSDL has no service with a SOAP port".into(),
            });
        }
        Ok(ports)
    }

    /// The one port to talk to: `port` of `service`, or the first SOAP port.
    pub fn port(&self, service: Option<&str>, port: Option<&str>) -> Result<&Port, String> {
        let ports = self.ports(service)?;
        match port {
            None => ports
                .first()
                .copied()
                .ok_or_else(|| "the WSDL has no SOAP port".into()),
            Some(n) => ports.iter().copied().find(|p| p.name == n).ok_or_else(|| {
                format!(
                    "the WSDL has no SOAP port named `{n}` (it has: {})",
                    ports
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }),
        }
    }

    /// The name of the service a port belongs to.
    pub fn service_of(&self, port: &Port) -> Option<&str> {
        self.services
            .iter()
            .find(|s| s.ports.iter().any(|p| std::ptr::eq(p, port)))
            .map(|s| s.name.as_str())
    }
}

fn collect(
    root: &Element,
    location: &Location,
    defs: &mut Defs,
    seen: &mut Vec<Location>,
    depth: usize,
) -> Result<(), String> {
    if depth > 16 {
        return Err(format!("{location}: wsdl:import nests too deep"));
    }
    let tns = root.attr("targetNamespace").unwrap_or("").to_owned();
    for el in root.elements() {
        if el.ns != WSDL_NS {
            continue;
        }
        let name = || el.attr("name").unwrap_or("").to_owned();
        match el.local.as_str() {
            "import" => {
                let Some(loc) = el.attr("location") else {
                    continue;
                };
                let loc = location.join(loc);
                if seen.contains(&loc) {
                    continue;
                }
                seen.push(loc.clone());
                let bytes = loc.read()?;
                let doc = xml::parse(&bytes).map_err(|e| format!("{loc}: {e}"))?;
                if doc.is(WSDL_NS, "definitions") {
                    collect(&doc, &loc, defs, seen, depth + 1)?;
                } else if doc.is(XSD_NS, "schema") {
                    defs.inline_schemas.push((doc, loc));
                } else {
                    return Err(format!("{loc}: neither a WSDL nor an XML Schema"));
                }
            }
            "types" => {
                for s in el.elements_named(XSD_NS, "schema") {
                    defs.inline_schemas.push((s.clone(), location.clone()));
                }
            }
            "message" => {
                defs.tns_messages.insert((tns.clone(), name()), el.clone());
            }
            "portType" => {
                defs.port_types.insert((tns.clone(), name()), el.clone());
            }
            "binding" => {
                defs.bindings.insert((tns.clone(), name()), el.clone());
            }
            "service" => defs.services.push(el.clone()),
            _ => {}
        }
    }
    Ok(())
}

const SOAP_BINDING_NS: [&str; 2] = [WSDL_SOAP11_NS, WSDL_SOAP12_NS];

fn build_services(defs: &Defs) -> Result<Vec<Service>, String> {
    let mut services = Vec::new();
    for s in &defs.services {
        let mut ports = Vec::new();
        for p in s.elements_named(WSDL_NS, "port") {
            let Some(addr) = p.element_in(&SOAP_BINDING_NS, "address") else {
                continue; // an HTTP or other non-SOAP port
            };
            let version = if addr.ns == WSDL_SOAP12_NS {
                SoapVersion::V12
            } else {
                SoapVersion::V11
            };
            let pname = p.attr("name").unwrap_or("").to_owned();
            let bq = p.resolve_qname(p.attr("binding").unwrap_or(""))?;
            let binding = defs
                .bindings
                .get(&bq)
                .ok_or_else(|| format!("port `{pname}` names the unknown binding `{}`", bq.1))?;
            let operations = build_operations(defs, binding)?;
            ports.push(Port {
                name: pname,
                version,
                address: addr.attr("location").unwrap_or("").to_owned(),
                operations,
            });
        }
        if !ports.is_empty() {
            services.push(Service {
                name: s.attr("name").unwrap_or("").to_owned(),
                ports,
            });
        }
    }
    Ok(services)
}

fn build_operations(defs: &Defs, binding: &Element) -> Result<Vec<Operation>, String> {
    let bname = binding.attr("name").unwrap_or("");
    let soap_binding = binding
        .element_in(&SOAP_BINDING_NS, "binding")
        .ok_or_else(|| format!("binding `{bname}` is not a SOAP binding"))?;
    let default_style = soap_binding.attr("style").unwrap_or("document");
    let ptq = binding.resolve_qname(binding.attr("type").unwrap_or(""))?;
    let port_type = defs
        .port_types
        .get(&ptq)
        .ok_or_else(|| format!("binding `{bname}` names the unknown portType `{}`", ptq.1))?;
    let mut ops = Vec::new();
    for bop in binding.elements_named(WSDL_NS, "operation") {
        let name = bop.attr("name").unwrap_or("").to_owned();
        let soap_op = bop.element_in(&SOAP_BINDING_NS, "operation");
        let style = match soap_op
            .and_then(|o| o.attr("style"))
            .unwrap_or(default_style)
        {
            "rpc" => Style::Rpc,
            _ => Style::Document,
        };
        let soap_action = soap_op
            .and_then(|o| o.attr("soapAction"))
            .unwrap_or("")
            .to_owned();
        let pop = port_type
            .elements_named(WSDL_NS, "operation")
            .find(|o| o.attr("name") == Some(name.as_str()))
            .ok_or_else(|| format!("operation `{name}` is not in the portType `{}`", ptq.1))?;
        let spec = |dir: &str| -> Result<Option<MessageSpec>, String> {
            let (Some(pm), Some(bm)) = (pop.element(WSDL_NS, dir), bop.element(WSDL_NS, dir))
            else {
                return Ok(None);
            };
            let body = bm.element_in(&SOAP_BINDING_NS, "body");
            message_spec(defs, pm, body, &name).map(Some)
        };
        let input = spec("input")?;
        let output = spec("output")?;
        let mut faults = Vec::new();
        for pf in pop.elements_named(WSDL_NS, "fault") {
            let fname = pf.attr("name").unwrap_or("").to_owned();
            faults.push((fname, message_spec(defs, pf, None, &name)?));
        }
        ops.push(Operation {
            name,
            soap_action,
            style,
            input,
            output,
            faults,
        });
    }
    Ok(ops)
}

fn message_spec(
    defs: &Defs,
    port_msg: &Element,
    body: Option<&Element>,
    op: &str,
) -> Result<MessageSpec, String> {
    if let Some(b) = body {
        if b.attr("use") == Some("encoded") {
            return Err(format!(
                "operation `{op}` uses SOAP encoding (use=\"encoded\"), which is not supported"
            ));
        }
    }
    let mq = port_msg.resolve_qname(port_msg.attr("message").unwrap_or(""))?;
    let msg = defs
        .tns_messages
        .get(&mq)
        .ok_or_else(|| format!("operation `{op}` names the unknown message `{}`", mq.1))?;
    let only: Option<Vec<&str>> = body
        .and_then(|b| b.attr("parts"))
        .map(|p| p.split_whitespace().collect());
    let mut parts = Vec::new();
    for p in msg.elements_named(WSDL_NS, "part") {
        let name = p.attr("name").unwrap_or("").to_owned();
        if only.as_ref().is_some_and(|o| !o.contains(&name.as_str())) {
            continue;
        }
        parts.push(Part {
            name,
            element: p.attr("element").map(|e| p.resolve_qname(e)).transpose()?,
            type_name: p.attr("type").map(|t| p.resolve_qname(t)).transpose()?,
        });
    }
    Ok(MessageSpec {
        message: mq,
        parts,
        namespace: body
            .and_then(|b| b.attr("namespace"))
            .unwrap_or("")
            .to_owned(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A WSDL of the shared test data (`../shared/data/wsdl`), for every test of this crate.
    pub(crate) fn shared(name: &str) -> Location {
        Location::File(
            format!(
                "{}/../../../shared/data/wsdl/{name}",
                env!("CARGO_MANIFEST_DIR")
            )
            .into(),
        )
    }

    #[test]
    fn reads_cities() {
        let w = Wsdl::load(&shared("cities.wsdl")).unwrap();
        let port = w.port(None, None).unwrap();
        assert_eq!(port.address, "http://localhost:2001/city-service");
        assert_eq!(port.version, SoapVersion::V11);
        let op = &port.operations[0];
        assert_eq!(op.name, "getCity");
        assert_eq!(op.soap_action, "https://predic8.de/cities");
        assert_eq!(
            op.body_element(false).unwrap(),
            ("https://predic8.de/cities".into(), "getCity".into())
        );
        assert_eq!(op.body_element(true).unwrap().1, "getCityResponse");
    }

    #[test]
    fn reads_partner_and_qualified() {
        let w = Wsdl::load(&shared("partner.wsdl")).unwrap();
        assert_eq!(w.port(None, None).unwrap().operations.len(), 5);
        assert!(w.port(Some("Nope"), None).is_err());
        let w = Wsdl::load(&shared("qualified-elements.wsdl")).unwrap();
        assert_eq!(w.port(None, None).unwrap().operations.len(), 2);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Damaged WSDLs (a byte range cut out or replaced) are load errors, never panics.
        #[test]
        fn damaged_wsdls_never_panic(start in 0usize..2500, len in 0usize..200, with in "[<>/a-z:=\" ]{0,6}") {
            let text = std::fs::read_to_string(shared("cities.wsdl").to_string()).unwrap();
            let start = start.min(text.len());
            let end = (start + len).min(text.len());
            let mut damaged = text.as_bytes()[..start].to_vec();
            damaged.extend_from_slice(with.as_bytes());
            damaged.extend_from_slice(&text.as_bytes()[end..]);
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("w.wsdl");
            std::fs::write(&p, damaged).unwrap();
            if let Ok(w) = Wsdl::load(&Location::File(p)) {
                let _ = crate::validator::WsdlValidator::new(std::sync::Arc::new(w), None);
            }
        }
    }

    #[test]
    fn missing_imports_are_load_errors() {
        let e = Wsdl::load(&shared("ArticleService.wsdl")).unwrap_err();
        assert!(e.contains("ArticleType.xsd"), "{e}");
    }
}
