//! The SOAP message as a libxml2 document (no DTD, no network, no entity expansion): finding,
//! creating and removing the `wsse:Security` header, and the small element helpers the parts
//! share.

use libxml::tree::{Document, Namespace, Node, SaveOptions};

use super::fault::{Fault, WsseCode};
use crate::names::SoapVersion;

pub use super::fault::WSSE_NS;
/// WS-Security's utility (`wsu`) namespace.
pub const WSU_NS: &str =
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd";
/// XML Signature's namespace.
pub const DS_NS: &str = "http://www.w3.org/2000/09/xmldsig#";
/// The `xml:` namespace.
const XML_NS: &str = "http://www.w3.org/XML/1998/namespace";

/// A parsed SOAP message.
pub struct Message {
    /// The document (owns every node below).
    pub doc: Document,
    /// The `Envelope`.
    pub envelope: Node,
    /// The SOAP version of the envelope.
    pub version: SoapVersion,
}

/// Why a body could not be read as a SOAP message.
#[derive(Debug)]
pub struct NotSoap(pub String);

/// Parses `body` as a SOAP envelope. Runs once per message; returns the document, or why it is
/// not a SOAP message (not well-formed, a DTD, another root element).
pub fn parse(body: &[u8]) -> Result<Message, NotSoap> {
    let mut owned = body.to_vec();
    let (doc, envelope) = crate::validator::parse_element_in(&mut owned).map_err(NotSoap)?;
    let ns = envelope
        .get_namespace()
        .map(|n| n.get_href())
        .unwrap_or_default();
    let version = SoapVersion::from_envelope_ns(&ns)
        .filter(|_| envelope.get_name() == "Envelope")
        .ok_or_else(|| NotSoap("the root element is not a SOAP 1.1 or 1.2 Envelope".into()))?;
    if child(&envelope, version.envelope_ns(), "Body").is_none() {
        return Err(NotSoap("the SOAP Envelope has no Body".into()));
    }
    Ok(Message {
        doc,
        envelope,
        version,
    })
}

impl Message {
    /// The message serialized again (UTF-8, no XML declaration). Runs once per changed message.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.doc
            .to_string_with_options(SaveOptions {
                no_declaration: true,
                ..SaveOptions::default()
            })
            .into_bytes()
    }

    /// The envelope's namespace.
    pub fn soap_ns(&self) -> &'static str {
        self.version.envelope_ns()
    }

    /// The `Body` element (checked to exist when parsed).
    pub fn body(&self) -> Option<Node> {
        child(&self.envelope, self.soap_ns(), "Body")
    }

    /// The `Header` element, if any.
    pub fn header(&self) -> Option<Node> {
        child(&self.envelope, self.soap_ns(), "Header")
    }

    /// The `wsse:Security` header block addressed to `actor` (`None`: the one without an
    /// actor/role attribute). More than one is a fault: which one counted would be ambiguous.
    pub fn security(&self, actor: Option<&str>) -> Result<Option<Node>, Fault> {
        let Some(header) = self.header() else {
            return Ok(None);
        };
        let attr = self.actor_attribute();
        let mut found: Vec<Node> = children(&header, WSSE_NS, "Security")
            .into_iter()
            .filter(|s| s.get_attribute_ns(attr, self.soap_ns()).as_deref() == actor)
            .collect();
        if found.len() > 1 {
            return Err(Fault::new(
                WsseCode::InvalidSecurity,
                "more than one wsse:Security header for this actor",
            ));
        }
        Ok(found.pop())
    }

    /// `actor` (SOAP 1.1) or `role` (SOAP 1.2).
    fn actor_attribute(&self) -> &'static str {
        match self.version {
            SoapVersion::V11 => "actor",
            SoapVersion::V12 => "role",
        }
    }

    /// A new, empty `wsse:Security` header block for `actor`, appended to the `Header` (created
    /// before the `Body` when missing).
    pub fn create_security(
        &mut self,
        actor: Option<&str>,
        must_understand: bool,
    ) -> Result<Node, Fault> {
        let soap_ns = self.soap_ns();
        let mut header = match self.header() {
            Some(h) => h,
            None => {
                let mut h = Node::new("Header", None, &self.doc).map_err(|_| internal())?;
                let mut body = self.body().ok_or_else(internal)?;
                body.add_prev_sibling(&mut h).map_err(|_| internal())?;
                let ns = namespace_for(&mut h, soap_ns, "soapenv")?;
                h.set_namespace(&ns).map_err(|_| internal())?;
                h
            }
        };
        let mut security = Node::new("Security", None, &self.doc).map_err(|_| internal())?;
        header.add_child(&mut security).map_err(|_| internal())?;
        let wsse = declare(&mut security, "wsse", WSSE_NS)?;
        security.set_namespace(&wsse).map_err(|_| internal())?;
        let soap = namespace_for(&mut security, soap_ns, "soapenv")?;
        if let Some(a) = actor {
            security
                .set_attribute_ns(self.actor_attribute(), a, &soap)
                .map_err(|_| internal())?;
        }
        if must_understand {
            let v = match self.version {
                SoapVersion::V11 => "1",
                SoapVersion::V12 => "true",
            };
            security
                .set_attribute_ns("mustUnderstand", v, &soap)
                .map_err(|_| internal())?;
        }
        Ok(security)
    }
}

/// The fault for a document operation of libxml2 that failed (out of memory).
pub fn internal() -> Fault {
    Fault::internal("the SOAP message could not be changed")
}

/// True when `n` is the element `{ns}local`.
pub fn is(n: &Node, ns: &str, local: &str) -> bool {
    n.get_name() == local && n.get_namespace().is_some_and(|x| x.get_href() == ns)
}

/// The element children `{ns}local` of `parent`.
pub fn children(parent: &Node, ns: &str, local: &str) -> Vec<Node> {
    parent
        .get_child_elements()
        .into_iter()
        .filter(|c| is(c, ns, local))
        .collect()
}

/// The first element child `{ns}local` of `parent`.
pub fn child(parent: &Node, ns: &str, local: &str) -> Option<Node> {
    parent
        .get_child_elements()
        .into_iter()
        .find(|c| is(c, ns, local))
}

/// The text of `n` with surrounding whitespace removed.
pub fn text(n: &Node) -> String {
    n.get_content().trim().to_owned()
}

/// Declares `prefix` (or, when `node` already declares it otherwise, `prefix` with a number)
/// for `href` on `node`.
pub fn declare(node: &mut Node, prefix: &str, href: &str) -> Result<Namespace, Fault> {
    for i in 0..100 {
        let p = if i == 0 {
            prefix.to_owned()
        } else {
            format!("{prefix}{i}")
        };
        let taken = node
            .get_namespace_declarations()
            .iter()
            .any(|n| n.get_prefix() == p);
        if !taken {
            return Namespace::new(&p, href, node).map_err(|_| internal());
        }
    }
    Err(internal())
}

/// A namespace for `href` usable on `node`: one in scope with a prefix, or a new declaration on
/// `node`.
pub fn namespace_for(node: &mut Node, href: &str, prefix: &str) -> Result<Namespace, Fault> {
    if let Some(ns) = node
        .get_namespace_declarations()
        .into_iter()
        .find(|n| n.get_href() == href && !n.get_prefix().is_empty())
    {
        return Ok(ns);
    }
    // In scope on an ancestor: a prefix bound to `href` that no nearer declaration rebinds.
    if let Some(p) = node.lookup_namespace_prefix(href).filter(|p| !p.is_empty()) {
        if node.lookup_namespace_uri(&p).as_deref() == Some(href) {
            let mut up = node.get_parent();
            while let Some(a) = up {
                if let Some(ns) = a
                    .get_namespace_declarations()
                    .into_iter()
                    .find(|n| n.get_prefix() == p && n.get_href() == href)
                {
                    return Ok(ns);
                }
                up = a.get_parent();
            }
        }
    }
    declare(node, prefix, href)
}

/// Appends the element `{ns}local` with the text `content` (escaped) to `parent`.
pub fn add_text(
    parent: &mut Node,
    ns: &Namespace,
    local: &str,
    content: &str,
) -> Result<Node, Fault> {
    if content.contains('\0') {
        return Err(Fault::internal(format!(
            "the text of {local} contains a NUL character"
        )));
    }
    let mut n = parent
        .add_text_child(Some(ns.clone()), local, "")
        .map_err(|_| internal())?;
    if !content.is_empty() {
        n.append_text(content).map_err(|_| internal())?;
    }
    Ok(n)
}

/// Appends the empty element `{ns}local` to `parent`.
pub fn add_element(parent: &mut Node, ns: &Namespace, local: &str) -> Result<Node, Fault> {
    parent
        .new_child(Some(ns.clone()), local)
        .map_err(|_| internal())
}

/// The element's `wsu:Id`, else its unqualified `Id`, else `None`.
pub fn id_of(n: &Node) -> Option<String> {
    n.get_attribute_ns("Id", WSU_NS)
        .or_else(|| n.get_attribute_no_ns("Id"))
        .filter(|s| !s.is_empty())
}

/// Every ID value of the document (`wsu:Id`, `Id`, `xml:id`) with how often it occurs, walked
/// from `root`.
pub fn all_ids(root: &Node) -> std::collections::HashMap<String, usize> {
    let mut out = std::collections::HashMap::new();
    let mut stack = vec![root.clone()];
    while let Some(n) = stack.pop() {
        for v in [
            n.get_attribute_ns("Id", WSU_NS),
            n.get_attribute_no_ns("Id"),
            n.get_attribute_ns("id", XML_NS),
        ]
        .into_iter()
        .flatten()
        {
            *out.entry(v).or_insert(0) += 1;
        }
        stack.extend(n.get_child_elements());
    }
    out
}

/// Random bytes from the operating system. Runs for every nonce and generated id.
pub fn random<const N: usize>() -> Result<[u8; N], Fault> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|_| Fault::internal("no randomness from the system"))?;
    Ok(b)
}

/// A fresh `wsu:Id` value: `prefix-` and 32 hex digits.
pub fn new_id(prefix: &str) -> Result<String, Fault> {
    let b: [u8; 16] = random()?;
    let mut s = String::with_capacity(prefix.len() + 33);
    s.push_str(prefix);
    s.push('-');
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    Ok(s)
}
