//! Membrane's SpEL tests as its configurations write them, translated to CEL: `and`, `or` and
//! `not` become `&&`, `||` and `!`, the comparison words `gt`, `lt`, `ge`, `le`, `eq`, `ne`
//! their operators; `x matches 'regex'` becomes `x.matches(r'^(?:regex)$')` (SpEL
//! matches the whole string); `?.` becomes `.`. The names (`method`, `path`, `header['X']`,
//! `statusCode`, `params`, `pathParam`) are resolved by the checker in SpEL mode, where
//! `m['k'] != null` tests whether the key is there.

/// `src` split into code (false) and the text of string literals (true), in order.
fn split_literals(src: &str) -> Vec<(bool, String)> {
    let mut parts: Vec<(bool, String)> = Vec::new();
    let mut rest = src;
    while let Some(start) = rest.find(['\'', '"']) {
        let quote = rest[start..].chars().next().unwrap_or('\'');
        parts.push((false, rest[..start].to_owned()));
        let body = &rest[start + 1..];
        let end = body.find(quote).map_or(body.len(), |e| e);
        parts.push((true, body[..end].to_owned()));
        rest = body.get(end + 1..).unwrap_or("");
    }
    parts.push((false, rest.to_owned()));
    parts
}

/// True when the code of `src` (outside string literals) uses SpEL's own syntax: the word
/// operators, `matches`, or safe navigation (`?.`).
pub fn uses_spel_syntax(src: &str) -> bool {
    split_literals(src)
        .iter()
        .filter(|(lit, _)| !lit)
        .any(|(_, code)| {
            code.contains("?.")
                || code.contains("?[")
                || code
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .any(|w| {
                        matches!(
                            w,
                            "and"
                                | "or"
                                | "not"
                                | "gt"
                                | "lt"
                                | "ge"
                                | "le"
                                | "eq"
                                | "ne"
                                | "matches"
                        )
                    })
        })
}

/// The CEL text for the SpEL test `src`.
pub fn translate(src: &str) -> String {
    // Split into string literals (kept) and the code between them (translated).
    let parts = split_literals(src);
    let mut out = String::new();
    let mut i = 0;
    while i < parts.len() {
        let (literal, text) = &parts[i];
        if *literal {
            out.push_str(&format!("r'{}'", text.replace('\'', "")));
            i += 1;
            continue;
        }
        let code = words(text);
        // `x matches 'r'`: the code before a literal ends with `matches`.
        if let (Some(before), Some((true, pattern))) =
            (code.trim_end().strip_suffix("matches"), parts.get(i + 1))
        {
            out.push_str(before.trim_end());
            out.push_str(&format!(".matches(r'^(?:{})$')", pattern.replace('\'', "")));
            i += 2;
            continue;
        }
        out.push_str(&code);
        i += 1;
    }
    out
}

/// Translates SpEL's word operators in code outside string literals.
fn words(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        match word.as_str() {
            "and" => out.push_str("&&"),
            "or" => out.push_str("||"),
            "not" => out.push('!'),
            "gt" => out.push('>'),
            "lt" => out.push('<'),
            "ge" => out.push_str(">="),
            "le" => out.push_str("<="),
            "eq" => out.push_str("=="),
            "ne" => out.push_str("!="),
            w => out.push_str(w),
        }
        word.clear();
    };
    for c in code.chars() {
        if c.is_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    let out = out
        .replace("?.[", "[")
        .replace("?.", ".")
        .replace("?[", "[")
        .replace(".[", "[")
        .replace("exchange.proxy.name", "exchange_proxy_name");
    first_values(&out)
}

/// `params.name[0]`, `param['name'][0]`: Membrane's parameters hold lists of values; here a
/// parameter is its first value, so the `[0]` is dropped.
fn first_values(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(i) = rest.find("[0]") {
        let before = &rest[..i];
        // The parameter access that ends right before: `param(s).NAME` or `param(s)[...]`.
        let start = before
            .rfind(|c: char| {
                !(c.is_alphanumeric() || c == '_' || c == '.' || c == '[' || c == ']' || c == '\'')
            })
            .map_or(0, |p| p + 1);
        let access = &before[start..];
        let is_param = access.starts_with("params.")
            || access.starts_with("param.")
            || access.starts_with("params[")
            || access.starts_with("param[");
        out.push_str(before);
        if !is_param {
            out.push_str("[0]");
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::translate;

    #[test]
    fn membranes_forms() {
        assert_eq!(translate("statusCode >= 400"), "statusCode >= 400");
        assert_eq!(
            translate(r"statusCode matches '4\d\d'"),
            r"statusCode.matches(r'^(?:4\d\d)$')"
        );
        assert_eq!(
            translate("header['X-Id'] == null and method == 'POST'"),
            "header[r'X-Id'] == null && method == r'POST'"
        );
        assert_eq!(translate("not isXML()"), "! isXML()");
        assert_eq!(
            translate(r#"path.startsWith("/foo")"#),
            "path.startsWith(r'/foo')"
        );
        assert_eq!(translate("params?.a?.[0] == 'v'"), "params.a == r'v'");
        assert_eq!(translate("param?.case?.[0] == 'a'"), "param.case == r'a'");
        assert_eq!(translate("list[0] == 1"), "list[0] == 1");
        assert_eq!(
            translate("statusCode gt 399 and statusCode le 499"),
            "statusCode > 399 && statusCode <= 499"
        );
        assert!(super::uses_spel_syntax("a gt 1"));
        assert!(super::uses_spel_syntax("params?.a == 'x'"));
        assert!(!super::uses_spel_syntax("request.method == 'gt and or'"));
    }
}
