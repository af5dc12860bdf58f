//! Parsing of sizes, lists, ranges and durations as the command-line conventions define them.
use crate::error::usage;
use anyhow::Result;
use std::time::Duration;

/// Parse a size: `4096`, `64K`, `64KiB`, `64kb`, `2M`, `1GiB`, `1.5M`. Binary multiples (K = 1024).
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let mult: u64 = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => {
            return Err(usage(format!(
                "'{s}' is not a size (use e.g. 4096, 64K, 512KiB, 2M, 1GiB)"
            )))
        }
    };
    let v: f64 = num.parse().map_err(|_| {
        usage(format!(
            "'{s}' is not a size (use e.g. 4096, 64K, 512KiB, 2M, 1GiB)"
        ))
    })?;
    // u64::MAX as f64 rounds up to 2^64: compare with >= so that nothing saturates silently.
    if !v.is_finite() || v < 0.0 || v * mult as f64 >= u64::MAX as f64 {
        return Err(usage(format!("size '{s}' is out of range")));
    }
    Ok((v * mult as f64).round() as u64)
}

/// Parse a comma-separated list of sizes: `128,1K,1M`.
pub fn parse_size_list(s: &str) -> Result<Vec<u64>> {
    let v: Result<Vec<u64>> = s
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(parse_size)
        .collect();
    let v = v?;
    if v.is_empty() {
        return Err(usage(format!("'{s}' is an empty list")));
    }
    Ok(v)
}

/// Parse a list of counts where each item is a number or an inclusive range: `1,2,4` or `1..8` or `1..4,8`.
pub fn parse_count_list(s: &str) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || usage(format!("'{part}' is not a number or a range like 1..8"));
        if let Some((a, b)) = part.split_once("..") {
            let a: u64 = a.trim().parse().map_err(|_| bad())?;
            let b: u64 = b
                .trim()
                .trim_start_matches('=')
                .parse()
                .map_err(|_| bad())?;
            if a > b {
                return Err(usage(format!("range '{part}' is empty (start > end)")));
            }
            out.extend(a..=b);
        } else {
            out.push(part.parse().map_err(|_| bad())?);
        }
    }
    if out.is_empty() {
        return Err(usage(format!("'{s}' is an empty list")));
    }
    Ok(out)
}

/// The longest duration a command accepts: ten years. Anything longer is a typo, and a deadline
/// that far ahead would overflow the clock (`Instant + d`).
const MAX_DURATION: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Parse a duration: `500ms`, `10s`, `2m`, `1h`, or plain seconds `1.5`; at most ten years (`MAX_DURATION`).
pub fn parse_duration(s: &str) -> Result<Duration> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| usage(format!("'{s}' is not a duration (use e.g. 500ms, 10s, 2m)")))?;
    let secs = match suffix {
        "ms" => v / 1000.0,
        "" | "s" => v,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => {
            return Err(usage(format!(
                "'{s}' is not a duration (use e.g. 500ms, 10s, 2m)"
            )))
        }
    };
    if !secs.is_finite() || secs < 0.0 || secs > MAX_DURATION.as_secs_f64() {
        return Err(usage(format!(
            "duration '{s}' is out of range (at most {}h, ten years)",
            MAX_DURATION.as_secs() / 3600
        )));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A measured amount of bytes as every report prints it: `812 B`, `1.50 KiB`, `23.40 MiB`,
/// `802 MiB` (three significant digits; binary units). `format_size` is for option values.
pub fn format_bytes(v: f64) -> String {
    let a = v.abs();
    let sign = if v < 0.0 { "-" } else { "" };
    const U: [(&str, f64); 4] = [
        ("TiB", (1u64 << 40) as f64),
        ("GiB", (1u64 << 30) as f64),
        ("MiB", 1048576.0),
        ("KiB", 1024.0),
    ];
    for (name, unit) in U {
        if a >= unit {
            let x = a / unit;
            return if x >= 100.0 {
                format!("{sign}{x:.0} {name}")
            } else {
                format!("{sign}{x:.2} {name}")
            };
        }
    }
    format!("{sign}{a:.0} B")
}

/// Format bytes compactly with binary units, as options take them: `512`, `64K`, `1.5M`, `2G`.
pub fn format_size(b: u64) -> String {
    const U: [(&str, u64); 4] = [
        ("T", 1 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ];
    for (name, m) in U {
        if b >= m {
            return if b.is_multiple_of(m) {
                format!("{}{name}", b / m)
            } else {
                format!("{:.1}{name}", b as f64 / m as f64)
            };
        }
    }
    b.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_bytes_read_alike_everywhere() {
        assert_eq!(format_bytes(812.0), "812 B");
        assert_eq!(format_bytes(1536.0), "1.50 KiB");
        assert_eq!(format_bytes(841089508.0), "802 MiB");
        assert_eq!(format_bytes(-3.0 * 1048576.0), "-3.00 MiB");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("512KiB").unwrap(), 512 << 10);
        assert_eq!(parse_size("2M").unwrap(), 2 << 20);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("1.5k").unwrap(), 1536);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("").is_err());
        assert!(crate::error::is_usage(&parse_size("x").unwrap_err()));
        assert_eq!(format_size(65536), "64K");
        assert_eq!(format_size(1536), "1.5K");
    }

    #[test]
    fn lists_and_ranges() {
        assert_eq!(parse_count_list("1..4").unwrap(), vec![1, 2, 3, 4]);
        assert_eq!(parse_count_list("1,2,8").unwrap(), vec![1, 2, 8]);
        assert_eq!(parse_count_list("1..2,8").unwrap(), vec![1, 2, 8]);
        assert!(parse_count_list("4..1").is_err());
        assert_eq!(
            parse_size_list("128,1K,1M").unwrap(),
            vec![128, 1024, 1 << 20]
        );
        assert!(parse_size_list(",").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("3 weeks").is_err());
        // Too large to be meant, or to be added to a clock: an error, never a panic.
        for huge in ["99999999999999999h", "1e300", "87601h"] {
            assert!(
                crate::error::is_usage(&parse_duration(huge).unwrap_err()),
                "{huge}"
            );
        }
        assert_eq!(parse_duration("87600h").unwrap(), MAX_DURATION);
    }

    #[test]
    fn sizes_that_do_not_fit() {
        assert!(parse_size("18446744073709551615").is_err());
        assert!(parse_size("16777216T").is_err());
        assert_eq!(parse_size("9223372036854775808").unwrap(), 1 << 63);
    }
}
