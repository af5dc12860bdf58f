//! The sampling interval as the runtime accepts it.
use anyhow::Result;
use memlens_measure::error::usage;
use memlens_measure::units::{format_size, parse_size};

/// The largest mean sampling interval: 1 TiB. The runtime draws each countdown from Exp(R) into a
/// signed 64-bit counter, so R must leave room for the tail of the draw; and an interval larger
/// than anything a program allocates samples nothing (`--inactive` loads the runtime that way).
const MAX_INTERVAL: u64 = 1 << 40;

/// A sampling interval from the command line (`flag` names the option in the error).
pub fn parse_interval(s: &str, flag: &str) -> Result<u64> {
    let v = parse_size(s).map_err(|e| usage(format!("bad {flag} '{s}': {e:#}")))?;
    if v > MAX_INTERVAL {
        return Err(usage(format!(
            "{flag} '{s}' is too large (at most {}; to load the runtime without sampling use --inactive)",
            format_size(MAX_INTERVAL)
        )));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        assert_eq!(parse_interval("512K", "--interval").unwrap(), 512 << 10);
        assert_eq!(parse_interval("0", "--interval").unwrap(), 0);
        assert_eq!(parse_interval("1T", "--interval").unwrap(), MAX_INTERVAL);
        for bad in ["1025G", "9223372036854775808", "18446744073709551615", "x"] {
            let e = parse_interval(bad, "--interval").unwrap_err();
            assert!(memlens_measure::error::is_usage(&e), "{bad}");
            assert!(format!("{e:#}").contains("--interval"), "{e:#}");
        }
    }
}
