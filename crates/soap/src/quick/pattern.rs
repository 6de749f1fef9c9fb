//! XML Schema `pattern` facets translated to the `regex` crate, for a conservative subset of
//! the XSD regular expression language whose meaning is the same in both: literal characters,
//! `.`, the single-character escapes, `\d` (as ASCII digits, which every Unicode version counts
//! as decimal digits) and `\s`, character classes with ranges and negation, groups,
//! alternatives and the quantifiers `?`, `*`, `+`, `{n}`, `{n,}` and `{n,m}`. Everything else
//! (`\i`, `\c`, `\w`, `\p{..}`, class subtraction, ...) is refused: the type is then left to
//! libxml2. XSD patterns match the whole value, so the translation is anchored.

/// Translates an XSD pattern; `None` when it is outside the supported subset (or invalid).
pub fn translate(xsd: &str) -> Option<String> {
    let mut out = String::from(r"\A(?:");
    let chars: Vec<char> = xsd.chars().collect();
    let mut i = 0;
    // Whether the previous item can take a quantifier.
    let mut atom = false;
    let mut depth = 0usize;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        match c {
            '(' => {
                out.push_str("(?:");
                depth += 1;
                atom = false;
            }
            ')' => {
                depth = depth.checked_sub(1)?;
                out.push(')');
                atom = true;
            }
            '|' => {
                out.push('|');
                atom = false;
            }
            '?' | '*' | '+' => {
                if !atom {
                    return None;
                }
                out.push(c);
                atom = false;
            }
            '{' => {
                if !atom {
                    return None;
                }
                let close = chars[i..].iter().position(|&x| x == '}')? + i;
                let body: String = chars[i..close].iter().collect();
                let (lo, hi) = match body.split_once(',') {
                    Some((lo, hi)) => (lo, Some(hi)),
                    None => (body.as_str(), None),
                };
                let number = |s: &str| {
                    (!s.is_empty() && s.len() <= 4 && s.bytes().all(|b| b.is_ascii_digit()))
                        .then(|| s.parse::<u32>().ok())
                        .flatten()
                };
                let lo = number(lo)?;
                match hi {
                    None => out.push_str(&format!("{{{lo}}}")),
                    Some("") => out.push_str(&format!("{{{lo},}}")),
                    Some(h) => {
                        let h = number(h)?;
                        if h < lo {
                            return None;
                        }
                        out.push_str(&format!("{{{lo},{h}}}"));
                    }
                }
                i = close + 1;
                atom = false;
            }
            '}' | ']' => return None,
            '.' => {
                out.push_str(r"[^\n\r]");
                atom = true;
            }
            '\\' => {
                let e = *chars.get(i)?;
                i += 1;
                out.push_str(&escape(e, false)?);
                atom = true;
            }
            '[' => {
                i = class(&chars, i, &mut out)?;
                atom = true;
            }
            c => {
                push_literal(&mut out, c);
                atom = true;
            }
        }
    }
    if depth != 0 {
        return None;
    }
    out.push_str(r")\z");
    Some(out)
}

/// Compiles a translated pattern (`None` when untranslatable or too large).
#[cfg(test)]
fn compile(xsd: &str) -> Option<regex::Regex> {
    regex::Regex::new(&translate(xsd)?).ok()
}

fn push_literal(out: &mut String, c: char) {
    if c.is_ascii_alphanumeric() || !c.is_ascii() {
        out.push(c);
    } else {
        out.push_str(&format!("\\x{{{:X}}}", c as u32));
    }
}

/// The translation of the escape `\e` (`in_class`: inside a character class).
fn escape(e: char, in_class: bool) -> Option<String> {
    let literal = |c: char| {
        let mut s = String::new();
        push_literal(&mut s, c);
        Some(s)
    };
    match e {
        'n' => literal('\n'),
        'r' => literal('\r'),
        't' => literal('\t'),
        '\\' | '|' | '.' | '-' | '^' | '?' | '*' | '+' | '{' | '}' | '(' | ')' | '[' | ']' => {
            literal(e)
        }
        'd' if in_class => Some("0-9".into()),
        'd' => Some("[0-9]".into()),
        's' if in_class => Some(r"\x{20}\x{9}\x{A}\x{D}".into()),
        's' => Some(r"[\x{20}\x{9}\x{A}\x{D}]".into()),
        'S' if !in_class => Some(r"[^\x{20}\x{9}\x{A}\x{D}]".into()),
        _ => None,
    }
}

/// One character of a class (a literal or a single-character escape) at `i`: the character
/// and the index after it. Multi-character escapes answer `None` in the second slot.
fn class_char(chars: &[char], i: usize) -> Option<(Option<char>, usize, Option<String>)> {
    let c = *chars.get(i)?;
    match c {
        '\\' => {
            let e = *chars.get(i + 1)?;
            let single = match e {
                'n' => Some('\n'),
                'r' => Some('\r'),
                't' => Some('\t'),
                '\\' | '|' | '.' | '-' | '^' | '?' | '*' | '+' | '{' | '}' | '(' | ')' | '['
                | ']' => Some(e),
                _ => None,
            };
            match single {
                Some(s) => Some((Some(s), i + 2, None)),
                None => Some((None, i + 2, Some(escape(e, true)?))),
            }
        }
        '[' => None,
        c => Some((Some(c), i + 1, None)),
    }
}

/// Translates the class that starts after its `[` at `i`; returns the index after its `]`.
fn class(chars: &[char], mut i: usize, out: &mut String) -> Option<usize> {
    out.push('[');
    if chars.get(i) == Some(&'^') {
        out.push('^');
        i += 1;
    }
    let mut first = true;
    loop {
        let c = *chars.get(i)?;
        if c == ']' && !first {
            out.push(']');
            return Some(i + 1);
        }
        if c == ']' {
            return None; // `[]` and `[^]`
        }
        if c == '-' && chars.get(i + 1) == Some(&'[') {
            return None; // subtraction
        }
        if c == '-' && !first && chars.get(i + 1) != Some(&']') {
            return None; // a `-` in the middle is not a plain character in XSD
        }
        first = false;
        let (lo, next, multi) = class_char(chars, i)?;
        i = next;
        let Some(lo) = lo else {
            out.push_str(&multi?);
            continue;
        };
        if chars.get(i) == Some(&'-') && chars.get(i + 1).is_some_and(|&n| n != ']') {
            let (hi, next, _) = class_char(chars, i + 1)?;
            let hi = hi?;
            if hi < lo {
                return None;
            }
            i = next;
            push_literal(out, lo);
            out.push('-');
            push_literal(out, hi);
        } else {
            push_literal(out, lo);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(p: &str, v: &str) -> bool {
        compile(p).unwrap().is_match(v)
    }

    #[test]
    fn translations_match_like_xsd() {
        assert!(matches("[0-9A-Z -]{3,10}", "53111"));
        assert!(matches("[0-9A-Z -]{3,10}", "AB 1-2"));
        assert!(!matches("[0-9A-Z -]{3,10}", "ab1"));
        assert!(!matches("[0-9A-Z -]{3,10}", "12"));
        assert!(!matches("[0-9A-Z -]{3,10}", "53111\n"));
        assert!(matches(r"\+?[0-9]{7,15}", "+49228123456"));
        assert!(!matches(r"\+?[0-9]{7,15}", "++49228123456"));
        assert!(matches(r"[A-Z]{2}-\d{5}", "AB-12345"));
        assert!(
            !matches(r"[A-Z]{2}-\d{5}", "AB-1234٥"),
            "\\d is ASCII only here"
        );
        // `^` and `$` are plain characters in XSD.
        assert!(matches("^a$", "^a$"));
        assert!(!matches("^a$", "a"));
        assert!(matches("a.c", "abc"));
        assert!(!matches("a.c", "a\nc"));
        assert!(matches("(ab|cd)+", "abcdab"));
        assert!(!matches("ab|cd", "abcd"));
        assert!(matches(r"[^a-c]x", "dx"));
        assert!(matches(r"[a&&b]", "&"), "`&&` is no intersection in XSD");
        assert!(matches(r"a\s\S", "a b"));
        assert!(matches("a{2,}", "aaa"));
        assert!(matches("x{0}", ""));
        assert!(matches(r"[\-a]", "-"));
    }

    #[test]
    fn unsupported_patterns_are_refused() {
        for p in [
            r"\i\c*",
            r"\w+",
            r"\p{Lu}",
            "[a-z-[aeiou]]",
            "[]",
            "a**",
            "a??",
            "(a",
            "a)",
            "{1}",
            "a{1",
            "a{,2}",
            "a{3,1}",
            "[a",
            r"\D",
            "[b-a]",
            "[a-c-e]",
            "]",
        ] {
            assert!(translate(p).is_none(), "{p}");
        }
    }
}
