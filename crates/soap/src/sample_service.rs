//! `sampleSoapService`: Membrane's built-in demo SOAP service, the CityService. It answers every
//! request itself, as Membrane does:
//!
//! * a URI whose query mentions `wsdl` (`?wsdl`, `?WSDL`, `?content-wsdl`; any method) gets the
//!   service's WSDL ([`CITY_WSDL`]), its `address` pointing at the URL the client used;
//! * any other method than `POST` gets a SOAP fault `Method <METHOD> not allowed`;
//! * a `POST` names a city in its first element with the local name `name` (any namespace,
//!   anywhere in the body): a city of [`CITIES`] gets a `getCityResponse` with its country and
//!   population, another name the fault `Not Found`, a body without such an element (or not
//!   XML) the fault `Resource Not Found`.
//!
//! Every answer has status 200, faults included (Membrane's choice). Unlike Membrane, text put
//! into a fault (the city asked for, the hint `<name>Bonn</name>`) is escaped.

use http::{header, HeaderValue, Method, Response, Uri};
use quick_xml::events::Event;
use quick_xml::Reader;
use schemars::JsonSchema;
use serde::Deserialize;
use turnpike_core::{Body, BodyNeed, Exchange, Outcome, Policy};
use turnpike_core::{CompileContext, CompileError, Phases, PolicyFactory};

use crate::xml::{escape_into, resolve_reference};

/// The service's WSDL (Membrane's `city.wsdl`), served at `?wsdl` with its address rewritten.
pub const CITY_WSDL: &str = include_str!("sample_service/city.wsdl");

/// The namespace of the service's messages.
pub const CITY_NS: &str = "https://predic8.de/cities";

const SOAP11_ENV_NS: &str = "http://schemas.xmlsoap.org/soap/envelope/";

/// A city the service knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct City {
    /// The name a request asks for (exact case).
    pub name: &'static str,
    /// The population answered.
    pub population: u64,
    /// The country answered.
    pub country: &'static str,
}

const fn city(name: &'static str, population: u64, country: &'static str) -> City {
    City {
        name,
        population,
        country,
    }
}

/// The cities the service knows: Membrane's table.
pub const CITIES: &[City] = &[
    city("Bonn", 327_000, "Germany"),
    city("Bielefeld", 333_000, "Germany"),
    city("Berlin", 3_897_000, "Germany"),
    city("Manila", 1_780_000, "Philippines"),
    city("Da Nang", 1_220_000, "Vietnam"),
    city("London", 8_980_000, "England"),
    city("New York", 8_460_000, "USA"),
    city("Delhi", 34_665_600, "India"),
    city("Beijing", 22_596_500, "China"),
    city("Tokyo", 37_036_200, "Japan"),
    city("Shanghai", 30_482_100, "China"),
    city("São Paulo", 22_990_000, "Brazil"),
    city("Jakarta", 11_350_000, "Indonesia"),
    city("San Francisco", 842_000, "USA"),
    city("Mumbai", 22_088_953, "India"),
    city("Nairobi", 5_767_000, "Kenya"),
    city("Paris", 11_346_800, "France"),
    city("Toronto", 7_106_400, "Canada"),
    city("Seoul", 10_025_800, "South Korea"),
    city("Sydney", 5_248_790, "Australia"),
    city("Barcelona", 5_733_250, "Spain"),
];

/// The city named exactly `name` (case matters), if the service knows it.
pub fn find_city(name: &str) -> Option<&'static City> {
    CITIES.iter().find(|c| c.name == name)
}

/// The message of the fault for a body without a `<name>` element.
pub const CANNOT_PARSE: &str =
    "Cannot parse SOAP message. Request should contain e.g. <name>Bonn</name>";

/// A SOAP 1.1 fault as Membrane's sample service writes it (indented, `s11:Client`), with
/// `fault_string`, `code` and `message` escaped into `faultstring`, `detail/errorcode` and
/// `detail/errormessage`.
pub fn fault_xml(fault_string: &str, code: &str, message: &str) -> String {
    let mut s = String::with_capacity(512);
    s.push_str("    <s11:Envelope xmlns:s11=\"");
    s.push_str(SOAP11_ENV_NS);
    s.push_str(
        "\">\n        <s11:Body>\n            <s11:Fault>\n                <faultcode>s11:Client</faultcode>\n                <faultstring>",
    );
    escape_into(&mut s, fault_string, false);
    s.push_str("</faultstring>\n                <detail>\n                    <errorcode>");
    escape_into(&mut s, code, false);
    s.push_str("</errorcode>\n                    <errormessage>");
    escape_into(&mut s, message, false);
    s.push_str(
        "</errormessage>\n                </detail>\n            </s11:Fault>\n        </s11:Body>\n    </s11:Envelope>\n",
    );
    s
}

/// The `getCityResponse` envelope for `city`, indented as Membrane writes it.
pub fn response_xml(city: &City) -> String {
    let mut s = String::with_capacity(384);
    s.push_str("<s:Envelope xmlns:s=\"");
    s.push_str(SOAP11_ENV_NS);
    s.push_str("\" xmlns:cs=\"");
    s.push_str(CITY_NS);
    s.push_str("\">\n    <s:Body>\n        <cs:getCityResponse>\n            <country>");
    escape_into(&mut s, city.country, false);
    s.push_str("</country>\n            <population>");
    s.push_str(&city.population.to_string());
    s.push_str("</population>\n        </cs:getCityResponse>\n    </s:Body>\n</s:Envelope>\n");
    s
}

/// The answer's XML for a `POST` body: the city's `getCityResponse`, or the fault `Not Found`
/// (an unknown name) or `Resource Not Found` (no `<name>` element, or not XML).
pub fn answer_xml(body: &[u8]) -> String {
    match name_text(body) {
        None => fault_xml("Resource Not Found", "404", CANNOT_PARSE),
        Some(name) => match find_city(&name) {
            Some(c) => response_xml(c),
            None => fault_xml(
                "Not Found",
                "404",
                &format!("Do not know {name}. Try Bonn, London or New York"),
            ),
        },
    }
}

/// True for characters XML 1.0 allows in a document.
fn is_xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..='\u{10FFFF}')
}

/// The text of the first element with the local name `name` (any prefix or namespace), read as
/// a streaming parser does: the body is read only up to that element's end. `None` when there
/// is no such element, the XML before or in it is not well-formed, or it holds an element
/// (mixed content), as Membrane's `getElementText` fails there.
pub fn name_text(body: &[u8]) -> Option<String> {
    let mut reader = Reader::from_reader(body);
    reader.config_mut().enable_all_checks(true);
    let mut depth = 0usize;
    let mut root_done = false;
    loop {
        match reader.read_event().ok()? {
            Event::Start(s) => {
                if root_done {
                    return None;
                }
                if s.local_name().as_ref() == b"name" {
                    return element_text(&mut reader);
                }
                depth += 1;
            }
            Event::Empty(s) => {
                if root_done {
                    return None;
                }
                if s.local_name().as_ref() == b"name" {
                    return Some(String::new());
                }
                root_done = depth == 0;
            }
            Event::End(_) => {
                depth = depth.checked_sub(1)?;
                root_done = depth == 0;
            }
            Event::Text(t) => {
                if depth == 0 && !t.iter().all(u8::is_ascii_whitespace) {
                    return None;
                }
            }
            Event::CData(_) | Event::GeneralRef(_) if depth == 0 => return None,
            Event::Eof => return None,
            Event::CData(_)
            | Event::GeneralRef(_)
            | Event::Comment(_)
            | Event::Decl(_)
            | Event::PI(_)
            | Event::DocType(_) => {}
        }
    }
}

/// The text up to the end of the element just opened; `None` on a child element or an error.
fn element_text(reader: &mut Reader<&[u8]>) -> Option<String> {
    let mut out = String::new();
    loop {
        match reader.read_event().ok()? {
            Event::Text(t) => out.push_str(&t.xml_content().ok()?),
            Event::CData(t) => out.push_str(&t.xml_content().ok()?),
            Event::GeneralRef(r) => out.push(resolve_reference(&r.decode().ok()?)?),
            Event::End(_) => break,
            Event::Comment(_) | Event::PI(_) => {}
            Event::Start(_) | Event::Empty(_) | Event::Eof | Event::Decl(_) | Event::DocType(_) => {
                return None
            }
        }
    }
    out.chars().all(is_xml_char).then_some(out)
}

/// True when the request asks for the WSDL: its query contains `wsdl` in any case (Membrane's
/// pattern `(?i).*\?.*wsdl.*`).
pub fn is_wsdl_request(uri: &Uri) -> bool {
    uri.query()
        .is_some_and(|q| q.to_ascii_lowercase().contains("wsdl"))
}

/// A piece of the WSDL as served.
#[derive(Debug)]
enum Piece {
    Text(&'static str),
    /// An `address` element: its qualified name, and whether it was written empty (`<x/>`).
    Address {
        qname: String,
        empty: bool,
    },
}

/// Splits [`CITY_WSDL`] around its `address` elements.
fn split_wsdl() -> Result<Vec<Piece>, String> {
    let text = CITY_WSDL;
    let mut reader = Reader::from_reader(text.as_bytes());
    reader.config_mut().enable_all_checks(true);
    let mut pieces = Vec::new();
    let mut done = 0usize;
    loop {
        let before = reader.buffer_position() as usize;
        let ev = reader.read_event().map_err(|e| e.to_string())?;
        let (s, empty) = match ev {
            Event::Start(s) => (s, false),
            Event::Empty(s) => (s, true),
            Event::Eof => break,
            _ => continue,
        };
        if s.local_name().as_ref() != b"address" {
            continue;
        }
        let after = reader.buffer_position() as usize;
        let qname = std::str::from_utf8(s.name().as_ref())
            .map_err(|e| e.to_string())?
            .to_owned();
        let head = text.get(done..before).ok_or("bad offsets")?;
        pieces.push(Piece::Text(head));
        pieces.push(Piece::Address { qname, empty });
        done = after;
    }
    pieces.push(Piece::Text(text.get(done..).ok_or("bad offsets")?));
    Ok(pieces)
}

/// `sampleSoapService` has no settings.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SampleSoapServiceSettings {}

/// The compiled `sampleSoapService` policy.
#[derive(Debug)]
pub struct SampleSoapService {
    wsdl: Vec<Piece>,
}

impl SampleSoapService {
    /// The WSDL as served to a client that reached the service at `location`: every `address`
    /// element becomes `<… location="<location>">` (Membrane replaces the element's attributes
    /// with that one).
    pub fn wsdl(&self, location: &str) -> String {
        let mut s = String::with_capacity(CITY_WSDL.len() + location.len());
        for p in &self.wsdl {
            match p {
                Piece::Text(t) => s.push_str(t),
                Piece::Address { qname, empty } => {
                    s.push('<');
                    s.push_str(qname);
                    s.push_str(" location=\"");
                    escape_into(&mut s, location, true);
                    s.push_str(if *empty { "\"/>" } else { "\">" });
                }
            }
        }
        s
    }
}

impl PolicyFactory for SampleSoapService {
    const NAME: &'static str = "sampleSoapService";
    const PHASES: Phases = Phases::REQUEST;
    const ANSWERS: bool = true;
    const SOAP: bool = true;
    type Settings = SampleSoapServiceSettings;

    /// Compiles the policy (it prepares the WSDL); fails only if the built-in WSDL does not
    /// parse.
    fn compile(_: SampleSoapServiceSettings, _: &CompileContext<'_>) -> Result<Self, CompileError> {
        let wsdl =
            split_wsdl().map_err(|e| CompileError::new("", format!("built-in WSDL: {e}")))?;
        Ok(SampleSoapService { wsdl })
    }
}

fn xml_response(body: String, content_type: &'static str) -> Response<Body> {
    let mut res = Response::new(Body::full(body));
    res.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    res
}

impl Policy for SampleSoapService {
    fn name(&self) -> &'static str {
        "sampleSoapService"
    }

    /// The body of a `POST` is read whole (up to the gateway's body limit).
    fn body_need(&self) -> BodyNeed {
        BodyNeed::Buffer
    }

    fn response_needs_request(&self) -> bool {
        false
    }

    /// Runs on every request and answers it (status 200): the WSDL for `?wsdl`, the city's
    /// `getCityResponse` or a SOAP fault otherwise. Never continues to a target.
    fn on_request(&self, ex: &mut Exchange) -> Outcome {
        if is_wsdl_request(&ex.request.uri) {
            // HTTP/2 clients send the authority in the URI instead of a `Host` header.
            let host = ex
                .request
                .headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .or_else(|| ex.request.uri.authority().map(|a| a.as_str()))
                .unwrap_or("localhost");
            let scheme = if ex.tls { "https" } else { "http" };
            let location = format!("{scheme}://{host}{}", ex.original_uri.path());
            return Outcome::Respond(xml_response(self.wsdl(&location), "text/xml;charset=UTF-8"));
        }
        let xml = if ex.request.method != Method::POST {
            fault_xml(
                &format!("Method {} not allowed", ex.request.method),
                "405",
                "Use POST to access the service.",
            )
        } else {
            answer_xml(ex.request_bytes().map_or(&[][..], |b| b.as_ref()))
        };
        Outcome::Respond(xml_response(xml, "text/xml"))
    }
}

#[cfg(test)]
mod tests;
