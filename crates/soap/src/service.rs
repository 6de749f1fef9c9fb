//! The WSDL model: services, their SOAP ports, and the operations with their messages.

use crate::names::{QName, SoapVersion};

/// Binding style of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// The body holds the parts' elements.
    Document,
    /// The body holds a wrapper named after the operation, with one child per part.
    Rpc,
}

/// A part of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// The part's name.
    pub name: String,
    /// The global element it is (document style).
    pub element: Option<QName>,
    /// The type it has (rpc style).
    pub type_name: Option<QName>,
}

/// One direction (input, output or fault) of an operation as bound to SOAP.
#[derive(Debug, Clone)]
pub struct MessageSpec {
    /// The message's name.
    pub message: QName,
    /// The parts in the body, in order.
    pub parts: Vec<Part>,
    /// `soap:body namespace` (rpc: the wrapper's namespace).
    pub namespace: String,
}

/// An operation of a SOAP binding.
#[derive(Debug, Clone)]
pub struct Operation {
    /// The operation's name.
    pub name: String,
    /// `soapAction` (may be empty).
    pub soap_action: String,
    /// Document or rpc.
    pub style: Style,
    /// The request.
    pub input: Option<MessageSpec>,
    /// The response.
    pub output: Option<MessageSpec>,
    /// Declared faults: name and message.
    pub faults: Vec<(String, MessageSpec)>,
}

impl Operation {
    /// The QName of the body's first child in the request (`output`: the response).
    pub fn body_element(&self, output: bool) -> Option<QName> {
        let spec = if output {
            self.output.as_ref()
        } else {
            self.input.as_ref()
        }?;
        match self.style {
            Style::Rpc => Some((
                spec.namespace.clone(),
                if output {
                    format!("{}Response", self.name)
                } else {
                    self.name.clone()
                },
            )),
            Style::Document => spec.parts.first().and_then(|p| p.element.clone()),
        }
    }
}

/// A port of a service: a SOAP binding at an address.
#[derive(Debug, Clone)]
pub struct Port {
    /// The port's name.
    pub name: String,
    /// SOAP 1.1 or 1.2.
    pub version: SoapVersion,
    /// The service address (`soap:address location`).
    pub address: String,
    /// The binding's operations.
    pub operations: Vec<Operation>,
}

/// A service.
#[derive(Debug, Clone)]
pub struct Service {
    /// The service's name.
    pub name: String,
    /// Its SOAP ports.
    pub ports: Vec<Port>,
}
