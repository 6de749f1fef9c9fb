//! Calendar dates and times of day (UTC) from system time, for log lines.

use std::time::{SystemTime, UNIX_EPOCH};

/// A point in time as a UTC calendar date and time of day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    /// The year (e.g. 2026).
    pub year: i64,
    /// 1 to 12.
    pub month: u32,
    /// 1 to 31.
    pub day: u32,
    /// 0 to 23.
    pub hour: u32,
    /// 0 to 59.
    pub minute: u32,
    /// 0 to 59.
    pub second: u32,
    /// 0 to 999.
    pub millis: u32,
}

/// English month abbreviations, January first.
pub const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

impl Civil {
    /// `t` in UTC (times before 1970 count as 1970-01-01).
    pub fn of(t: SystemTime) -> Civil {
        let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = since.as_secs();
        let (days, rem) = (secs / 86_400, secs % 86_400);
        // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
        let z = days as i64 + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        Civil {
            year,
            month: month as u32,
            day: day as u32,
            hour: (rem / 3600) as u32,
            minute: (rem % 3600 / 60) as u32,
            second: (rem % 60) as u32,
            millis: since.subsec_millis(),
        }
    }

    /// The month's English abbreviation (`Jan`).
    pub fn month_name(&self) -> &'static str {
        MONTHS[(self.month.clamp(1, 12) - 1) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn dates() {
        let c = Civil::of(UNIX_EPOCH + Duration::from_millis(971_185_336_250));
        assert_eq!(
            (c.year, c.month, c.day, c.hour, c.minute, c.second, c.millis),
            (2000, 10, 10, 13, 42, 16, 250)
        );
        assert_eq!(c.month_name(), "Oct");
        let leap = Civil::of(UNIX_EPOCH + Duration::from_secs(1_709_210_096));
        assert_eq!((leap.year, leap.month, leap.day), (2024, 2, 29));
        assert_eq!(Civil::of(UNIX_EPOCH).year, 1970);
    }
}
