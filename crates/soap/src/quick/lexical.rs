//! Lexical checks of the built-in XML Schema types the fast path knows, on values whose
//! whitespace was already collapsed (no leading, trailing or inner whitespace). Each check is
//! a conservative subset of the XSD 1.0 lexical space as libxml2 implements it: what it
//! accepts, libxml2 accepts too; rarer spellings (a `-` on zero, `.5`, more than 18 digits,
//! years beyond 9999, ...) are refused and leave the verdict to libxml2.

/// The most digits a number may have (leading zeros included) for the fast path.
pub const MAX_DIGITS: usize = 18;

/// A decimal number: its digits as an integer and the number of fraction digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decimal {
    /// The digits, with the sign (`-12.50` is `-1250`).
    pub mantissa: i128,
    /// Digits after the point as written (`-12.50`: 2).
    pub scale: u32,
    /// Digits written, leading and trailing zeros included.
    pub digits: u32,
}

impl Decimal {
    /// The value scaled to [`MAX_DIGITS`] fraction digits, for comparisons.
    pub fn scaled(self) -> i128 {
        self.mantissa * 10i128.pow(MAX_DIGITS as u32 - self.scale)
    }
}

/// Parses `[+-]?digits(.digits)?` with at most [`MAX_DIGITS`] digits; `integer`: no point.
/// A negative zero (`-0`, `-0.0`) is refused.
pub fn decimal(v: &str, integer: bool) -> Option<Decimal> {
    let b = v.as_bytes();
    let (neg, rest) = match b.first()? {
        b'-' => (true, &b[1..]),
        b'+' => (false, &b[1..]),
        _ => (false, b),
    };
    let (int, frac) = match rest.iter().position(|&c| c == b'.') {
        Some(p) if !integer => (&rest[..p], Some(&rest[p + 1..])),
        Some(_) => return None,
        None => (rest, None),
    };
    if int.is_empty() || !int.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let frac = match frac {
        Some(f) if f.is_empty() || !f.iter().all(u8::is_ascii_digit) => return None,
        Some(f) => f,
        None => &[],
    };
    let digits = int.len() + frac.len();
    if digits > MAX_DIGITS {
        return None;
    }
    let mut m: i128 = 0;
    for &c in int.iter().chain(frac) {
        m = m * 10 + i128::from(c - b'0');
    }
    if neg && m == 0 {
        return None;
    }
    Some(Decimal {
        mantissa: if neg { -m } else { m },
        scale: frac.len() as u32,
        digits: digits as u32,
    })
}

/// `true`, `false`, `1` or `0`.
pub fn boolean(v: &str) -> bool {
    matches!(v, "true" | "false" | "1" | "0")
}

/// A float (`double`: a double): `[+-]?digits(.digits)?([eE][+-]?digits)?`, `INF`, `-INF` or
/// `NaN`; finite values must be within the type's range and not denormal.
pub fn float(v: &str, double: bool) -> bool {
    if matches!(v, "INF" | "-INF" | "NaN") {
        return true;
    }
    let b = v.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let digits = |i: &mut usize| {
        let s = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - s
    };
    let int = digits(&mut i);
    if int == 0 {
        return false;
    }
    let mut total = int;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let f = digits(&mut i);
        if f == 0 {
            return false;
        }
        total += f;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let e = digits(&mut i);
        if e == 0 || e > 3 {
            return false;
        }
    }
    if i != b.len() || total > 30 {
        return false;
    }
    let Ok(x) = v.parse::<f64>() else {
        return false;
    };
    let a = x.abs();
    if double {
        a == 0.0 || (1e-300..=1e300).contains(&a)
    } else {
        a == 0.0 || (1e-37..=3.4e38).contains(&a)
    }
}

fn two(b: &[u8], i: usize) -> Option<u32> {
    let (h, l) = (*b.get(i)?, *b.get(i + 1)?);
    if h.is_ascii_digit() && l.is_ascii_digit() {
        Some(u32::from(h - b'0') * 10 + u32::from(l - b'0'))
    } else {
        None
    }
}

fn leap(year: u32) -> bool {
    (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400)
}

/// `YYYY-MM-DD` (year 0001 to 9999) at the start of `b`; returns its length.
fn date_part(b: &[u8]) -> Option<usize> {
    let year = two(b, 0)? * 100 + two(b, 2)?;
    if year == 0 || b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') {
        return None;
    }
    let (month, day) = (two(b, 5)?, two(b, 8)?);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap(year) => 29,
        2 => 28,
        _ => return None,
    };
    (1..=days).contains(&day).then_some(10)
}

/// `hh:mm:ss(.s+)?` (hours below 24, at most 9 fraction digits) at the start of `b`; returns
/// its length.
fn time_part(b: &[u8]) -> Option<usize> {
    let (h, m, s) = (two(b, 0)?, two(b, 3)?, two(b, 6)?);
    if b.get(2) != Some(&b':') || b.get(5) != Some(&b':') || h > 23 || m > 59 || s > 59 {
        return None;
    }
    let mut i = 8;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start || i - start > 9 {
            return None;
        }
    }
    Some(i)
}

/// An optional time zone (`Z` or `+hh:mm`/`-hh:mm` below 14 hours) that ends `b`.
fn zone(b: &[u8]) -> bool {
    match b {
        [] | [b'Z'] => true,
        [b'+' | b'-', ..] if b.len() == 6 => {
            b[3] == b':' && two(b, 1).is_some_and(|h| h < 14) && two(b, 4).is_some_and(|m| m < 60)
        }
        _ => false,
    }
}

/// `xsd:date`.
pub fn date(v: &str) -> bool {
    let b = v.as_bytes();
    date_part(b).is_some_and(|n| zone(&b[n..]))
}

/// `xsd:time`.
pub fn time(v: &str) -> bool {
    let b = v.as_bytes();
    time_part(b).is_some_and(|n| zone(&b[n..]))
}

/// `xsd:dateTime`.
pub fn date_time(v: &str) -> bool {
    let b = v.as_bytes();
    let Some(n) = date_part(b) else {
        return false;
    };
    if b.get(n) != Some(&b'T') {
        return false;
    }
    let rest = &b[n + 1..];
    time_part(rest).is_some_and(|t| zone(&rest[t..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_and_integers() {
        assert_eq!(decimal("172", true).map(|d| d.mantissa), Some(172));
        assert_eq!(decimal("+7", true).map(|d| d.mantissa), Some(7));
        assert_eq!(
            decimal("-12.50", false).map(|d| (d.mantissa, d.scale)),
            Some((-1250, 2))
        );
        assert_eq!(decimal("007", true).map(|d| d.digits), Some(3));
        for bad in [
            "", "-", "+", "1.", ".5", "1.5", "1e3", "0x1", "1 2", "--1", "-0", "-0.00",
        ] {
            assert!(decimal(bad, true).is_none(), "{bad}");
        }
        for bad in ["1.", ".5", "1.2.3", "-", "-0.0", "1,5", "١"] {
            assert!(decimal(bad, false).is_none(), "{bad}");
        }
        assert!(decimal("123456789012345678", true).is_some());
        assert!(decimal("1234567890123456789", true).is_none());
        assert!(decimal("0.0", false).is_some());
    }

    #[test]
    fn booleans_and_floats() {
        for ok in ["true", "false", "1", "0"] {
            assert!(boolean(ok));
        }
        for bad in ["True", "yes", "", "01", " true"] {
            assert!(!boolean(bad));
        }
        for ok in [
            "1", "-1.5", "1e10", "1.5E-3", "INF", "-INF", "NaN", "0", "+2",
        ] {
            assert!(float(ok, false) && float(ok, true), "{ok}");
        }
        for bad in [
            "", "1.", ".5", "e5", "1e", "+INF", "inf", "nan", "1e1000", "1 ", "0x10",
        ] {
            assert!(!float(bad, true), "{bad}");
        }
        assert!(!float("1e39", false));
        assert!(float("1e39", true));
        assert!(!float("1e-40", false));
    }

    #[test]
    fn dates_and_times() {
        for ok in [
            "1990-04-01",
            "2024-02-29",
            "2000-02-29",
            "0001-01-01Z",
            "1990-04-01+13:59",
        ] {
            assert!(date(ok), "{ok}");
        }
        for bad in [
            "1990-4-01",
            "1990-04-31",
            "2023-02-29",
            "1900-02-29",
            "0000-01-01",
            "-0001-01-01",
            "10000-01-01",
            "1990-13-01",
            "1990-00-10",
            "1990-04-00",
            "1990-04-01+14:00",
            "1990-04-01+1:00",
            "1990-04-01z",
            "1990-04-01 ",
            "1990-04-01T00:00:00",
        ] {
            assert!(!date(bad), "{bad}");
        }
        for ok in ["00:00:00", "23:59:59.999", "12:30:00Z", "12:30:00-05:00"] {
            assert!(time(ok), "{ok}");
        }
        for bad in [
            "24:00:00",
            "12:60:00",
            "12:00:60",
            "12:00",
            "12:00:00.",
            "1:00:00",
        ] {
            assert!(!time(bad), "{bad}");
        }
        assert!(date_time("1990-04-01T12:00:00Z"));
        assert!(date_time("1990-04-01T12:00:00.5+01:00"));
        assert!(!date_time("1990-04-01 12:00:00"));
        assert!(!date_time("1990-04-01T"));
        assert!(!date_time("1990-04-01T12:00"));
    }
}
