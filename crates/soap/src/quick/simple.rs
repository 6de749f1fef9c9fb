//! Simple types of the fast path: a built-in base and the facets of its restrictions, checked
//! against an element's text or an attribute's value.

use regex::Regex;

use super::lexical::{self, Decimal};

/// The built-in types the fast path knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    /// `xsd:string` (whitespace preserved).
    String,
    /// `xsd:normalizedString`.
    NormalizedString,
    /// `xsd:token`.
    Token,
    /// `xsd:boolean`.
    Boolean,
    /// `xsd:decimal`.
    Decimal,
    /// `xsd:integer` and its derived types, with their bounds.
    Integer {
        /// Smallest value allowed.
        min: Option<i128>,
        /// Largest value allowed.
        max: Option<i128>,
    },
    /// `xsd:float`.
    Float,
    /// `xsd:double`.
    Double,
    /// `xsd:date`.
    Date,
    /// `xsd:dateTime`.
    DateTime,
    /// `xsd:time`.
    Time,
}

impl Builtin {
    /// The built-in type named `local` in the XML Schema namespace.
    pub fn named(local: &str) -> Option<Builtin> {
        let int = |min: Option<i128>, max: Option<i128>| Some(Builtin::Integer { min, max });
        match local {
            "string" => Some(Builtin::String),
            "normalizedString" => Some(Builtin::NormalizedString),
            "token" => Some(Builtin::Token),
            "boolean" => Some(Builtin::Boolean),
            "decimal" => Some(Builtin::Decimal),
            "integer" => int(None, None),
            "nonPositiveInteger" => int(None, Some(0)),
            "negativeInteger" => int(None, Some(-1)),
            "nonNegativeInteger" => int(Some(0), None),
            "positiveInteger" => int(Some(1), None),
            "long" => int(Some(i64::MIN.into()), Some(i64::MAX.into())),
            "int" => int(Some(i32::MIN.into()), Some(i32::MAX.into())),
            "short" => int(Some(i16::MIN.into()), Some(i16::MAX.into())),
            "byte" => int(Some(i8::MIN.into()), Some(i8::MAX.into())),
            "unsignedLong" => int(Some(0), Some(u64::MAX.into())),
            "unsignedInt" => int(Some(0), Some(u32::MAX.into())),
            "unsignedShort" => int(Some(0), Some(u16::MAX.into())),
            "unsignedByte" => int(Some(0), Some(u8::MAX.into())),
            "float" => Some(Builtin::Float),
            "double" => Some(Builtin::Double),
            "date" => Some(Builtin::Date),
            "dateTime" => Some(Builtin::DateTime),
            "time" => Some(Builtin::Time),
            _ => None,
        }
    }

    /// `string`, `normalizedString` or `token`.
    pub fn is_string(self) -> bool {
        matches!(
            self,
            Builtin::String | Builtin::NormalizedString | Builtin::Token
        )
    }

    /// True when libxml2 (2.9) takes values of the type with whitespace around them. It does
    /// not for the bounded integer types (`int`, `long`, `unsignedByte`, ...) and the date and
    /// time types, although XSD collapses their whitespace.
    pub fn trims(self) -> bool {
        match self {
            Builtin::Decimal | Builtin::Boolean | Builtin::Float | Builtin::Double => true,
            Builtin::Integer { min, max } => min.is_none() || max.is_none(),
            _ => false,
        }
    }

    /// True for `unsignedLong`, `unsignedInt`, `unsignedShort` and `unsignedByte`, whose
    /// values libxml2 (2.9) refuses with a `+` sign.
    fn unsigned(self) -> bool {
        matches!(
            self,
            Builtin::Integer {
                min: Some(0),
                max: Some(_)
            }
        )
    }

    /// `decimal` or an integer type.
    pub fn is_numeric(self) -> bool {
        matches!(self, Builtin::Decimal | Builtin::Integer { .. })
    }
}

/// How whitespace of a value is treated before the checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum WhiteSpace {
    /// As written.
    Preserve,
    /// Tabs and line ends become spaces (the fast path takes only values without them).
    Replace,
    /// Also runs of spaces become one, leading and trailing ones go (the fast path takes
    /// only values already in that form, except for non-string types, which it trims).
    Collapse,
}

/// A bound of a numeric range.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    /// The bound, scaled as by [`Decimal::scaled`].
    pub value: i128,
    /// The bound itself is allowed.
    pub inclusive: bool,
}

/// A compiled simple type.
#[derive(Debug, Clone)]
pub struct Simple {
    /// The built-in type it restricts.
    pub base: Builtin,
    /// Whitespace handling.
    pub white_space: WhiteSpace,
    /// Enumerations, one list per restriction step (each must hold the value).
    pub enumerations: Vec<Vec<String>>,
    /// Patterns, one per restriction step (each must match).
    pub patterns: Vec<Regex>,
    /// Smallest and largest length in characters.
    pub length: (usize, usize),
    /// Lower bounds (string family: none).
    pub min: Vec<Bound>,
    /// Upper bounds.
    pub max: Vec<Bound>,
    /// `totalDigits`.
    pub total_digits: Option<u32>,
    /// `fractionDigits`.
    pub fraction_digits: Option<u32>,
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl Simple {
    /// The built-in type without facets.
    pub fn builtin(base: Builtin) -> Simple {
        let white_space = match base {
            Builtin::String => WhiteSpace::Preserve,
            Builtin::NormalizedString => WhiteSpace::Replace,
            _ => WhiteSpace::Collapse,
        };
        Simple {
            base,
            white_space,
            enumerations: Vec::new(),
            patterns: Vec::new(),
            length: (0, usize::MAX),
            min: Vec::new(),
            max: Vec::new(),
            total_digits: None,
            fraction_digits: None,
        }
    }

    /// True when `value` (the text as the parser reports it) is certainly valid.
    pub fn accepts(&self, value: &str) -> bool {
        if self.base.is_string() {
            self.accepts_string(value)
        } else {
            if !self.base.trims() {
                return self.accepts_collapsed(value);
            }
            let b = value.as_bytes();
            let start = b.iter().position(|&c| !is_ws(c)).unwrap_or(b.len());
            let end = b.iter().rposition(|&c| !is_ws(c)).map_or(start, |e| e + 1);
            self.accepts_collapsed(&value[start..end])
        }
    }

    fn accepts_string(&self, v: &str) -> bool {
        match self.white_space {
            WhiteSpace::Preserve => {}
            WhiteSpace::Replace => {
                if v.bytes().any(|b| matches!(b, b'\t' | b'\n' | b'\r')) {
                    return false;
                }
            }
            WhiteSpace::Collapse => {
                let b = v.as_bytes();
                if b.iter().any(|&c| matches!(c, b'\t' | b'\n' | b'\r'))
                    || b.first() == Some(&b' ')
                    || b.last() == Some(&b' ')
                    || v.contains("  ")
                {
                    return false;
                }
            }
        }
        if self.length != (0, usize::MAX) {
            let n = v.chars().count();
            if n < self.length.0 || n > self.length.1 {
                return false;
            }
        }
        self.enumerations.iter().all(|e| e.iter().any(|x| x == v))
            && self.patterns.iter().all(|p| p.is_match(v))
    }

    fn accepts_collapsed(&self, v: &str) -> bool {
        match self.base {
            Builtin::Boolean => lexical::boolean(v),
            Builtin::Float => lexical::float(v, false),
            Builtin::Double => lexical::float(v, true),
            Builtin::Date => lexical::date(v),
            Builtin::DateTime => lexical::date_time(v),
            Builtin::Time => lexical::time(v),
            Builtin::Decimal => lexical::decimal(v, false).is_some_and(|d| self.in_range(d)),
            Builtin::Integer { .. } if self.base.unsigned() && v.starts_with('+') => false,
            Builtin::Integer { min, max } => lexical::decimal(v, true).is_some_and(|d| {
                min.is_none_or(|m| d.mantissa >= m)
                    && max.is_none_or(|m| d.mantissa <= m)
                    && self.in_range(d)
            }),
            Builtin::String | Builtin::NormalizedString | Builtin::Token => false,
        }
    }

    fn in_range(&self, d: Decimal) -> bool {
        let x = d.scaled();
        self.min.iter().all(|b| {
            if b.inclusive {
                x >= b.value
            } else {
                x > b.value
            }
        }) && self.max.iter().all(|b| {
            if b.inclusive {
                x <= b.value
            } else {
                x < b.value
            }
        }) && self.total_digits.is_none_or(|t| d.digits <= t)
            && self.fraction_digits.is_none_or(|f| d.scale <= f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(name: &str) -> Simple {
        Simple::builtin(Builtin::named(name).unwrap())
    }

    #[test]
    fn integer_ranges_and_whitespace() {
        let t = int("int");
        assert!(t.accepts("172"));
        assert!(t.accepts("+172"));
        // libxml2 2.9 refuses whitespace around bounded integers (and dates and times) ...
        assert!(!t.accepts(" 172 "));
        assert!(!t.accepts("172\n"));
        assert!(!Simple::builtin(Builtin::Date).accepts(" 1990-04-01"));
        // ... but takes it around unbounded ones, decimals, booleans and floats.
        for (name, v) in [
            ("integer", "\n\t172\r\n"),
            ("nonNegativeInteger", " 1"),
            ("decimal", " 1.5 "),
            ("boolean", "true\n"),
            ("double", " 1e3"),
        ] {
            assert!(int(name).accepts(v), "{name} {v:?}");
        }
        assert!(!int("unsignedInt").accepts("+1"));
        assert!(int("nonNegativeInteger").accepts("+1"));
        assert!(t.accepts("2147483647"));
        assert!(t.accepts("-2147483648"));
        assert!(!t.accepts("2147483648"));
        assert!(!t.accepts("-2147483649"));
        assert!(!t.accepts("1 72"));
        assert!(!t.accepts(""));
        assert!(!int("integer").accepts("   "));
        assert!(!t.accepts("1\u{a0}"));
        let b = int("byte");
        assert!(b.accepts("127") && b.accepts("-128") && !b.accepts("128"));
        let u = int("unsignedByte");
        assert!(u.accepts("255") && !u.accepts("256") && !u.accepts("-1"));
        let p = int("positiveInteger");
        assert!(p.accepts("1") && !p.accepts("0"));
        let n = int("nonPositiveInteger");
        assert!(n.accepts("0") && n.accepts("-5") && !n.accepts("1"));
        let neg = int("negativeInteger");
        assert!(neg.accepts("-1") && !neg.accepts("0"));
        let l = int("long");
        assert!(l.accepts("123456789012345678"));
        assert!(
            !l.accepts("9223372036854775807"),
            "too many digits for the fast path"
        );
    }

    #[test]
    fn string_family_and_facets() {
        let mut s = Simple::builtin(Builtin::String);
        assert!(s.accepts(" a \n b "));
        s.length = (2, 3);
        assert!(s.accepts("äö") && !s.accepts("a") && !s.accepts("abcd"));
        s.enumerations.push(vec!["ab".into(), "abc".into()]);
        assert!(s.accepts("ab") && !s.accepts("ba") && !s.accepts(" ab"));
        let t = Simple::builtin(Builtin::Token);
        assert!(t.accepts("a b"));
        for unsure in [" a", "a ", "a  b", "a\tb", "a\nb"] {
            assert!(!t.accepts(unsure), "{unsure:?}");
        }
        let n = Simple::builtin(Builtin::NormalizedString);
        assert!(n.accepts(" a  b "));
        assert!(!n.accepts("a\tb"));
    }

    #[test]
    fn decimal_facets() {
        let mut d = Simple::builtin(Builtin::Decimal);
        d.min.push(Bound {
            value: lexical::decimal("0", false).unwrap().scaled(),
            inclusive: false,
        });
        d.max.push(Bound {
            value: lexical::decimal("10.5", false).unwrap().scaled(),
            inclusive: true,
        });
        d.total_digits = Some(4);
        d.fraction_digits = Some(2);
        assert!(d.accepts("10.5") && d.accepts("0.01") && d.accepts("10.50"));
        assert!(!d.accepts("0") && !d.accepts("10.51") && !d.accepts("0.001"));
        assert!(!d.accepts("10.500"), "digits are counted as written");
        assert!(!d.accepts("-1"));
    }
}
