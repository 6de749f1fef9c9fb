//! The OpenAPI 3.0 document of the REST API a WSDL is offered as.

use http::Method;
use serde_json::{json, Map, Value};

use super::compiled::{RestOp, Seg};
use crate::wsdl::SoapVersion;
use crate::xsd::{Kind, Model, Particle, Scalar, Type};

fn scalar_schema(s: &Scalar) -> Value {
    let mut v = match s.kind {
        Kind::Integer => json!({"type": "integer"}),
        Kind::Number => json!({"type": "number"}),
        Kind::Boolean => json!({"type": "boolean"}),
        Kind::Date => json!({"type": "string", "format": "date"}),
        Kind::DateTime => json!({"type": "string", "format": "date-time"}),
        Kind::String => json!({"type": "string"}),
    };
    if !s.enumeration.is_empty() {
        v["enum"] = json!(s.enumeration);
    }
    v
}

fn type_schema(t: &Type, model: &Model, stack: &mut Vec<usize>) -> Value {
    match t {
        Type::Scalar(s) => scalar_schema(s),
        Type::Any => json!({}),
        Type::Complex(i) => {
            let Some(c) = model.types.get(*i) else {
                return json!({});
            };
            if stack.contains(i) || stack.len() > 32 {
                return json!({"type": "object", "description": "recursive"});
            }
            stack.push(*i);
            let mut props = Map::new();
            let mut required = Vec::new();
            for a in &c.attributes {
                props.insert(a.name.clone(), scalar_schema(&a.scalar));
                if a.required {
                    required.push(Value::String(a.name.clone()));
                }
            }
            if let Some(s) = &c.text {
                props.insert("$value".into(), scalar_schema(s));
            }
            for p in &c.particles {
                props.insert(p.name.clone(), particle_schema(p, model, stack));
                if p.min > 0 {
                    required.push(Value::String(p.name.clone()));
                }
            }
            stack.pop();
            let mut v = json!({"type": "object", "properties": props});
            if !required.is_empty() {
                v["required"] = Value::Array(required);
            }
            if !c.any {
                v["additionalProperties"] = Value::Bool(false);
            }
            v
        }
    }
}

fn particle_schema(p: &Particle, model: &Model, stack: &mut Vec<usize>) -> Value {
    let mut item = type_schema(&p.typ, model, stack);
    if p.nillable {
        item["nullable"] = Value::Bool(true);
    }
    if p.repeated() {
        let mut v = json!({"type": "array", "items": item});
        if p.max != u32::MAX {
            v["maxItems"] = json!(p.max);
        }
        if p.min > 1 {
            v["minItems"] = json!(p.min);
        }
        v
    } else {
        item
    }
}

pub(super) fn openapi(
    service: &str,
    prefix: &str,
    ops: &[RestOp],
    model: &Model,
    v: SoapVersion,
) -> Value {
    let problem_ref =
        json!({"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}});
    let mut paths = Map::new();
    for op in ops {
        let mut stack = Vec::new();
        let input = type_schema(&op.input.typ, model, &mut stack);
        let output = op
            .output
            .as_ref()
            .map_or(json!({}), |o| type_schema(&o.typ, model, &mut stack));
        let mut o = json!({
            "operationId": op.name,
            "summary": format!("SOAP operation {} (SOAPAction `{}`)", op.name, op.soap_action),
            "responses": {
                "400": {"description": "Invalid request, or a client fault of the service", "content": problem_ref},
                "502": {"description": "A server fault of the service, or an unreadable answer", "content": problem_ref},
            }
        });
        o["responses"][op.status.as_str()] = if op.status == http::StatusCode::NO_CONTENT
            || op.status == http::StatusCode::RESET_CONTENT
        {
            json!({"description": "The operation succeeded"})
        } else {
            json!({"description": "The operation's response", "content": {"application/json": {"schema": output}}})
        };
        if let Some(t) = &op.tag {
            o["tags"] = json!([t]);
        }
        let mut params = Vec::new();
        for s in &op.segments {
            if let Seg::Param(p) = s {
                let schema = property_schema(&input, p);
                params.push(json!({"name": p, "in": "path", "required": true, "schema": schema}));
            }
        }
        if op.method == Method::GET || op.method == Method::DELETE {
            if let Some(props) = input.get("properties").and_then(Value::as_object) {
                for (name, schema) in props {
                    if op.segments.contains(&Seg::Param(name.clone()))
                        || schema.get("properties").is_some()
                    {
                        continue;
                    }
                    params.push(json!({"name": name, "in": "query", "schema": schema}));
                }
            }
        } else {
            o["requestBody"] =
                json!({"required": true, "content": {"application/json": {"schema": input}}});
        }
        if !params.is_empty() {
            o["parameters"] = Value::Array(params);
        }
        let entry = paths
            .entry(op.path.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        entry[op.method.as_str().to_ascii_lowercase()] = o;
    }
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": service,
            "version": "1.0",
            "description": format!("REST/JSON API generated by Turnpike from the WSDL of {service} (SOAP {}).", match v { SoapVersion::V11 => "1.1", SoapVersion::V12 => "1.2" }),
        },
        "servers": [{"url": if prefix.is_empty() { "/" } else { prefix }}],
        "paths": paths,
        "components": {"schemas": {"Problem": {
            "type": "object",
            "properties": {
                "type": {"type": "string"}, "title": {"type": "string"}, "status": {"type": "integer"},
                "detail": {"type": "string"}, "faultcode": {"type": "string"}, "faultstring": {"type": "string"},
                "faultdetail": {}, "errors": {"type": "array", "items": {"type": "string"}}
            }
        }}}
    })
}

fn property_schema(obj: &Value, name: &str) -> Value {
    obj.get("properties")
        .and_then(|p| p.get(name))
        .cloned()
        .unwrap_or(json!({"type": "string"}))
}
