//! `xs:dateTime` values of `wsu:Created` and `wsu:Expires`: written in UTC with milliseconds
//! (`2026-05-04T10:20:30.123Z`), read with any offset (`+02:00`) or none (taken as UTC).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use turnpike_core::civil::Civil;

/// `t` as an `xs:dateTime` in UTC with milliseconds.
pub fn format(t: SystemTime) -> String {
    let c = Civil::of(t);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        c.year, c.month, c.day, c.hour, c.minute, c.second, c.millis
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn digits(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Parses an `xs:dateTime` (`YYYY-MM-DDThh:mm:ss[.fraction][Z|±hh:mm]`); `None` when it is not
/// one or lies before 1970.
pub fn parse(s: &str) -> Option<SystemTime> {
    let s = s.trim();
    let (date, rest) = s.split_once('T')?;
    let mut d = date.splitn(3, '-');
    let (y, mo, da) = (digits(d.next()?)?, digits(d.next()?)?, digits(d.next()?)?);
    if date.len() != 10 || !(1..=12).contains(&mo) || !(1..=31).contains(&da) {
        return None;
    }
    // The time ends where the zone begins.
    let (time, offset_secs) = if let Some(t) = rest.strip_suffix('Z') {
        (t, 0i64)
    } else if let Some(i) = rest.rfind(['+', '-']).filter(|&i| i >= 8) {
        let (t, z) = rest.split_at(i);
        let sign = if z.starts_with('-') { -1 } else { 1 };
        let (h, m) = z[1..].split_once(':')?;
        if h.len() != 2 || m.len() != 2 {
            return None;
        }
        let (h, m) = (digits(h)?, digits(m)?);
        if h > 14 || m > 59 {
            return None;
        }
        (t, sign * (h * 3600 + m * 60))
    } else {
        (rest, 0)
    };
    let (hms, frac) = match time.split_once('.') {
        Some((a, f)) => (a, Some(f)),
        None => (time, None),
    };
    let mut t = hms.splitn(3, ':');
    let (h, mi, se) = (digits(t.next()?)?, digits(t.next()?)?, digits(t.next()?)?);
    if hms.len() != 8 || h > 24 || mi > 59 || se > 60 {
        return None;
    }
    let nanos = match frac {
        Some(f) => {
            digits(f)?;
            let f = &f[..f.len().min(9)];
            let n: u32 = f.parse().ok()?;
            n * 10u32.pow(9 - f.len() as u32)
        }
        None => 0,
    };
    let secs = days_from_civil(y, mo, da) * 86_400 + h * 3600 + mi * 60 + se - offset_secs;
    let secs = u64::try_from(secs).ok()?;
    UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_offsets() {
        let t = UNIX_EPOCH + Duration::from_millis(1_780_000_000_123);
        let s = format(t);
        assert_eq!(s, "2026-05-28T20:26:40.123Z");
        assert_eq!(parse(&s), Some(t));
        assert_eq!(
            parse("2026-05-28T22:26:40.123+02:00"),
            Some(t),
            "an offset is applied"
        );
        assert_eq!(parse("2026-05-28T20:26:40.123"), Some(t), "no zone: UTC");
        assert_eq!(
            parse("2003-07-16T01:24:32Z"),
            Some(UNIX_EPOCH + Duration::from_secs(1_058_318_672))
        );
        for bad in [
            "",
            "2026-05-28",
            "2026-13-01T00:00:00Z",
            "2026-05-28T25:00:00Z",
            "2026-5-28T20:26:40Z",
            "x026-05-28T20:26:40Z",
            "2026-05-28T20:26:40.x1Z",
            "1969-12-31T23:59:59Z",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
