//! Re-indenting JSON and XML text by two spaces (`beautifier`, `static`/`template` with
//! `pretty`, `soapBody`), keeping what the text says: JSON members in their order and values as
//! written; XML declarations, comments, CDATA and processing instructions.

use quick_xml::events::Event;

/// Re-indents valid JSON text by two spaces, keeping the order of its members.
pub(crate) fn reindent(json: &str) -> String {
    let mut out = String::with_capacity(json.len() * 2);
    let mut depth = 0usize;
    let (mut in_string, mut escaped) = (false, false);
    let mut chars = json.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        for _ in 0..depth {
            out.push_str("  ");
        }
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                // An empty object or array stays on one line.
                while chars.peek().is_some_and(|n| n.is_whitespace()) {
                    chars.next();
                }
                if matches!(chars.peek(), Some('}' | ']')) {
                    if let Some(close) = chars.next() {
                        out.push(close);
                    }
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

/// XML re-indented by two spaces; `None` when it is not well-formed.
pub(crate) fn xml(body: &[u8]) -> Option<Vec<u8>> {
    let mut reader = quick_xml::Reader::from_reader(body);
    reader.config_mut().check_end_names = true;
    let mut writer =
        quick_xml::Writer::new_with_indent(Vec::with_capacity(body.len() * 2), b' ', 2);
    let mut depth = 0usize;
    let mut roots = 0usize;
    loop {
        let event = reader.read_event().ok()?;
        match &event {
            Event::Start(_) => {
                if depth == 0 {
                    roots += 1;
                }
                depth += 1;
            }
            Event::Empty(_) if depth == 0 => roots += 1,
            Event::End(_) => depth = depth.checked_sub(1)?,
            // Whitespace between elements gives way to the indentation; other text stays as it
            // is (entity references come as events of their own).
            Event::Text(t) if t.iter().all(u8::is_ascii_whitespace) => continue,
            Event::Text(_) | Event::GeneralRef(_) | Event::CData(_) if depth == 0 => return None,
            Event::Eof => break,
            _ => {}
        }
        writer.write_event(event).ok()?;
    }
    if depth != 0 || roots != 1 {
        return None;
    }
    let mut out = writer.into_inner();
    out.push(b'\n');
    Some(out)
}
