//! Input token estimates, as Membrane makes them before a request goes to the provider (the
//! provider's own count is only known from its response): roughly four characters a token.
//! Characters are counted as Java counts them (UTF-16 code units).

use serde_json::{Map, Value};

use super::providers::Api;

/// The length of `s` in UTF-16 code units.
fn len(s: &str) -> i64 {
    s.encode_utf16().count() as i64
}

/// The characters of text a node holds: the node itself when it is a string, the items of an
/// array, and of an object its `text` plus whatever its `content` and `parts` hold.
pub fn count_text(node: Option<&Value>) -> i64 {
    match node {
        Some(Value::String(s)) => len(s),
        Some(Value::Array(items)) => items.iter().map(|i| count_text(Some(i))).sum(),
        Some(Value::Object(o)) => {
            let text = match o.get("text") {
                Some(Value::String(s)) => len(s),
                _ => 0,
            };
            text + count_text(o.get("content")) + count_text(o.get("parts"))
        }
        _ => 0,
    }
}

/// The length of a node's compact JSON (tool and function definitions count whole).
fn json_size(node: Option<&Value>) -> i64 {
    match node {
        None | Some(Value::Null) => 0,
        Some(v) => len(&v.to_string()),
    }
}

/// Four characters a token plus 15% for structure and tokenizer variance, rounded as Java's
/// `Math.round`; never less than one token.
pub fn chars_to_tokens(chars: i64) -> i64 {
    let t = (chars as f64 / 4.0 * 1.15 + 0.5).floor() as i64;
    t.max(1)
}

/// The estimated input tokens of a request body of `api` (0 for requests that carry no model
/// input).
pub fn input_tokens(api: Api, json: &Map<String, Value>) -> i64 {
    match api {
        Api::ChatCompletions | Api::Responses => openai(json),
        Api::Claude => claude(json),
        Api::Google => google(json),
        Api::Other => 0,
    }
}

/// OpenAI (both APIs): `input`, each message's `content` and `role`, `system`,
/// `instructions`, and the JSON of `tools` and `functions`.
fn openai(json: &Map<String, Value>) -> i64 {
    let mut chars = count_text(json.get("input"));
    if let Some(Value::Array(messages)) = json.get("messages") {
        for m in messages {
            chars += count_text(m.get("content"));
            if let Some(Value::String(role)) = m.get("role") {
                chars += len(role);
            }
        }
    }
    chars += count_text(json.get("system"));
    chars += count_text(json.get("instructions"));
    chars += json_size(json.get("tools"));
    chars += json_size(json.get("functions"));
    chars_to_tokens(chars)
}

/// Claude: a quarter of the characters of `system` and of each text (integer division per
/// item), and 1000 tokens for each image block.
fn claude(json: &Map<String, Value>) -> i64 {
    let mut tokens = match json.get("system") {
        Some(Value::String(s)) => len(s) / 4,
        _ => 0,
    };
    if let Some(Value::Array(messages)) = json.get("messages") {
        for m in messages {
            match m.get("content") {
                Some(Value::String(s)) => tokens += len(s) / 4,
                Some(Value::Array(blocks)) => {
                    for b in blocks {
                        match b.get("type").and_then(Value::as_str) {
                            Some("text") => {
                                tokens += b.get("text").and_then(Value::as_str).map_or(0, len) / 4
                            }
                            Some("image") => tokens += 1000,
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
    }
    tokens
}

/// Google: the text of `systemInstruction` and of every content's `parts`.
fn google(json: &Map<String, Value>) -> i64 {
    let mut chars = count_text(json.get("systemInstruction"));
    if let Some(Value::Array(contents)) = json.get("contents") {
        for c in contents {
            chars += count_text(c.get("parts"));
        }
    }
    chars_to_tokens(chars)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn llm_rounding_is_javas() {
        assert_eq!(chars_to_tokens(0), 1);
        assert_eq!(chars_to_tokens(4), 1); // 1.15
        assert_eq!(chars_to_tokens(10), 3); // 2.875
        assert_eq!(chars_to_tokens(400), 115);
        assert_eq!(chars_to_tokens(6), 2); // 1.725
    }

    #[test]
    fn llm_openai_counts_input_messages_roles_and_tools() {
        // "input" as a string: 40 chars → 11.5 → 12.
        let j = obj(json!({"model": "gpt-5", "input": "a".repeat(40)}));
        assert_eq!(input_tokens(Api::Responses, &j), 12);
        // Messages: content text and role; array content blocks count their `text`.
        let j = obj(json!({"messages": [
            {"role": "user", "content": "abcd"},
            {"role": "assistant", "content": [{"type": "text", "text": "efgh"}]}
        ]}));
        // 4 + 4 + 4 + 9 = 21 chars → 6.0375 → 6
        assert_eq!(input_tokens(Api::ChatCompletions, &j), 6);
        // Tools count as their compact JSON.
        let j = obj(json!({"tools": [{"a": 1}]}));
        assert_eq!(json_size(j.get("tools")), 9);
        assert_eq!(input_tokens(Api::ChatCompletions, &j), 3);
        // Instructions count; an empty request is one token.
        let j = obj(json!({"instructions": "x".repeat(8)}));
        assert_eq!(input_tokens(Api::Responses, &j), 2);
        assert_eq!(input_tokens(Api::Responses, &Map::new()), 1);
        // Characters are UTF-16 units: 😀 is two.
        assert_eq!(count_text(Some(&json!("😀ä"))), 3);
    }

    #[test]
    fn llm_claude_divides_each_text_and_charges_images() {
        let j = obj(json!({
            "system": "s".repeat(9),
            "messages": [
                {"role": "user", "content": "u".repeat(7)},
                {"role": "user", "content": [
                    {"type": "text", "text": "t".repeat(12)},
                    {"type": "image", "source": {}},
                    {"type": "tool_result", "content": "ignored"}
                ]}
            ]
        }));
        assert_eq!(input_tokens(Api::Claude, &j), 2 + 1 + 3 + 1000);
        assert_eq!(input_tokens(Api::Claude, &Map::new()), 0);
    }

    #[test]
    fn llm_google_counts_system_instruction_and_parts() {
        let j = obj(json!({
            "systemInstruction": {"parts": [{"text": "x".repeat(20)}]},
            "contents": [{"role": "user", "parts": [{"text": "y".repeat(60)}]}]
        }));
        // 80 chars → 23
        assert_eq!(input_tokens(Api::Google, &j), 23);
    }
}
