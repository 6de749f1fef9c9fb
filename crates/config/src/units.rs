//! Value types with units: durations (`250ms`, `5s`, `1m`, ISO-8601 `PT1H`) and byte sizes
//! (`64KiB`, `10MB`, or a plain number of bytes), and yes/no flags.

use std::borrow::Cow;
use std::fmt;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{de, Deserialize, Deserializer};

/// A duration written as `250ms`, `5s`, `2m`, `1h`, `1d`, or ISO-8601 (`PT1H`, `PT0.5S`, `P1D`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Duration(pub std::time::Duration);

impl Duration {
    /// Parses the textual forms described on the type.
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if let Some(iso) = s.strip_prefix('P') {
            return parse_iso(iso).map(Duration);
        }
        let split = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("`{s}` has no unit (use ms, s, m, h or d)"))?;
        let (num, unit) = s.split_at(split);
        let n: f64 = num
            .parse()
            .map_err(|_| format!("`{s}` is not a duration"))?;
        let secs = match unit.trim() {
            "ms" => n / 1000.0,
            "s" => n,
            "m" | "min" => n * 60.0,
            "h" => n * 3600.0,
            "d" => n * 86400.0,
            other => {
                return Err(format!(
                    "unknown duration unit `{other}` (use ms, s, m, h or d)"
                ))
            }
        };
        Ok(Duration(std::time::Duration::from_secs_f64(secs)))
    }
}

fn parse_iso(rest: &str) -> Result<std::time::Duration, String> {
    let err = || format!("`P{rest}` is not an ISO-8601 duration such as PT1H or PT30S");
    let mut secs = 0f64;
    let mut in_time = false;
    let mut num = String::new();
    let mut any = false;
    for c in rest.chars() {
        match c {
            'T' if !in_time && num.is_empty() => in_time = true,
            '0'..='9' | '.' | ',' => num.push(if c == ',' { '.' } else { c }),
            _ => {
                let n: f64 = num.parse().map_err(|_| err())?;
                num.clear();
                any = true;
                secs += n * match (in_time, c) {
                    (false, 'D') => 86400.0,
                    (false, 'W') => 7.0 * 86400.0,
                    (true, 'H') => 3600.0,
                    (true, 'M') => 60.0,
                    (true, 'S') => 1.0,
                    _ => return Err(err()),
                };
            }
        }
    }
    if !num.is_empty() || !any {
        return Err(err());
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Duration::parse(&s).map_err(de::Error::custom)
    }
}

impl JsonSchema for Duration {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "A duration: 250ms, 5s, 2m, 1h, 1d, or ISO-8601 such as PT1H",
            "pattern": "^(\\d+(\\.\\d+)?\\s*(ms|s|m|min|h|d)|P.+)$"
        })
    }
}

/// A size in bytes: a number, or a number with `B`, `KB`/`KiB`, `MB`/`MiB`, `GB`/`GiB`.
/// KB, MB and GB are 1024-based, as in nginx.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// Parses the forms described on the type.
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let n: u64 = num.parse().map_err(|_| format!("`{s}` is not a size"))?;
        let mult = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            "g" | "gb" | "gib" => 1 << 30,
            other => return Err(format!("unknown size unit `{other}` (use B, KB, MB or GB)")),
        };
        n.checked_mul(mult)
            .map(ByteSize)
            .ok_or_else(|| format!("`{s}` is too large"))
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a size such as 1048576, 64KB or 10MB")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom("a size cannot be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                ByteSize::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for ByteSize {
    fn schema_name() -> Cow<'static, str> {
        "ByteSize".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A size in bytes: a number, or 64KB, 10MB, 1GB (1024-based)",
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": "^\\d+\\s*([kKmMgG]i?[bB]?|[bB])?$"}
            ]
        })
    }
}

/// A boolean that also accepts YAML 1.1's `yes`/`no`/`on`/`off`, as Membrane configs use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flag(pub bool);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Flag;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("true/false (or yes/no, on/off)")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Flag, E> {
                Ok(Flag(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Flag, E> {
                match v.to_ascii_lowercase().as_str() {
                    "yes" | "on" | "true" | "y" => Ok(Flag(true)),
                    "no" | "off" | "false" | "n" => Ok(Flag(false)),
                    _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for Flag {
    fn schema_name() -> Cow<'static, str> {
        "Flag".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "anyOf": [
                {"type": "boolean"},
                {"enum": ["yes", "no", "on", "off", "Yes", "No", "On", "Off"]}
            ]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration as D;

    #[test]
    fn durations() {
        assert_eq!(Duration::parse("250ms").unwrap().0, D::from_millis(250));
        assert_eq!(Duration::parse("5s").unwrap().0, D::from_secs(5));
        assert_eq!(Duration::parse("2m").unwrap().0, D::from_secs(120));
        assert_eq!(Duration::parse("PT1H").unwrap().0, D::from_secs(3600));
        assert_eq!(Duration::parse("PT1M30S").unwrap().0, D::from_secs(90));
        assert_eq!(Duration::parse("P1DT1S").unwrap().0, D::from_secs(86401));
        assert_eq!(Duration::parse("PT0.5S").unwrap().0, D::from_millis(500));
        assert!(Duration::parse("5").is_err());
        assert!(Duration::parse("5x").is_err());
        assert!(Duration::parse("PT").is_err());
        assert!(Duration::parse("P1H").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(ByteSize::parse("10MB").unwrap().0, 10 << 20);
        assert_eq!(ByteSize::parse("64KiB").unwrap().0, 64 << 10);
        assert_eq!(ByteSize::parse("123").unwrap().0, 123);
        assert!(ByteSize::parse("1TB").is_err());
        assert!(ByteSize::parse("x").is_err());
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn parsers_never_panic(s in "\\PC{0,40}") {
            let _ = Duration::parse(&s);
            let _ = ByteSize::parse(&s);
        }

        #[test]
        fn seconds_and_iso_agree(n in 0u64..100_000) {
            prop_assert_eq!(Duration::parse(&format!("{n}s")).unwrap(), Duration::parse(&format!("PT{n}S")).unwrap());
            prop_assert_eq!(ByteSize::parse(&format!("{n}KB")).unwrap().0, n * 1024);
        }
    }
}
