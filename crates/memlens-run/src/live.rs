//! Profiling on demand, as `memlens run` is asked for it: the options `--inactive`,
//! `--start-on-growth`, `--profile-for` and `--dump-every`, checked and turned into a [`LivePlan`]
//! that the [`crate::watcher`] carries out while the program runs.
use anyhow::Result;
use memlens_measure::error::usage;
use memlens_measure::units::{parse_duration, parse_size};
use std::time::Duration;

/// How often the watcher reads the child's resident memory: the shortest `--dump-every` and
/// `--start-on-growth` window a plan may ask for.
pub(crate) const POLL: Duration = Duration::from_millis(100);

/// Options of `memlens run` for profiling on demand (flattened into RunArgs).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LiveArgs {
    /// Load the runtime with sampling off; switch it on later with `memlens ctl PID start`
    #[arg(long)]
    pub(crate) inactive: bool,
    /// Start sampling when resident memory grows by SIZE within DURATION, e.g. 200M/10s (starts inactive)
    #[arg(long, value_name = "SIZE/DURATION")]
    pub(crate) start_on_growth: Option<String>,
    /// With --start-on-growth: after sampling this long, write STEM.growth.pb.gz and stop sampling
    #[arg(long, value_name = "DURATION", requires = "start_on_growth")]
    pub(crate) profile_for: Option<String>,
    /// While the program runs, write a numbered profile STEM.N.pb.gz every DURATION
    #[arg(long, value_name = "DURATION")]
    pub(crate) dump_every: Option<String>,
}

/// The validated plan.
#[derive(Debug, Clone, Default)]
pub struct LivePlan {
    /// Load the runtime with sampling off.
    pub inactive: bool,
    /// Start sampling when RSS grows by this many bytes within this time.
    pub growth: Option<(u64, Duration)>,
    /// After a growth start, dump and stop after this long.
    pub profile_for: Option<Duration>,
    /// Dump periodically.
    pub dump_every: Option<Duration>,
}

impl LiveArgs {
    /// Check the options (usage errors) before the program is started.
    pub(crate) fn plan(&self) -> Result<LivePlan> {
        let growth = self
            .start_on_growth
            .as_deref()
            .map(parse_growth)
            .transpose()?;
        let profile_for = self
            .profile_for
            .as_deref()
            .map(|s| duration("--profile-for", s))
            .transpose()?;
        let dump_every = self
            .dump_every
            .as_deref()
            .map(|s| duration("--dump-every", s))
            .transpose()?;
        if dump_every.is_some_and(|d| d < POLL) {
            return Err(usage("--dump-every must be at least 100ms"));
        }
        Ok(LivePlan {
            inactive: self.inactive || growth.is_some(),
            growth,
            profile_for,
            dump_every,
        })
    }
}

impl LivePlan {
    /// Value for MEMLENS_ACTIVE in the child's environment, if the plan sets one.
    pub fn active_env(&self) -> Option<&'static str> {
        self.inactive.then_some("0")
    }

    pub(crate) fn needs_watcher(&self) -> bool {
        self.growth.is_some() || self.dump_every.is_some()
    }
}

/// A duration option's value; the error names the option.
fn duration(flag: &str, s: &str) -> Result<Duration> {
    parse_duration(s).map_err(|e| usage(format!("bad {flag}: {e:#}")))
}

fn parse_growth(s: &str) -> Result<(u64, Duration)> {
    let (size, dur) = s.split_once('/').ok_or_else(|| {
        usage(format!(
            "--start-on-growth wants SIZE/DURATION (e.g. 200M/10s), got '{s}'"
        ))
    })?;
    let size = parse_size(size).map_err(|e| usage(format!("bad --start-on-growth: {e:#}")))?;
    let dur = duration("--start-on-growth", dur)?;
    if size == 0 || dur < POLL {
        return Err(usage(format!(
            "--start-on-growth '{s}': SIZE must be > 0 and DURATION at least 100ms"
        )));
    }
    Ok((size, dur))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_spec() {
        assert_eq!(
            parse_growth("200M/10s").unwrap(),
            (200 << 20, Duration::from_secs(10))
        );
        assert!(parse_growth("200M").is_err());
        assert!(parse_growth("0/1s").is_err());
        assert!(parse_growth("1M/1ms").is_err());
    }

    #[test]
    fn plan_implies_inactive() {
        let a = LiveArgs {
            start_on_growth: Some("1M/1s".into()),
            ..Default::default()
        };
        assert_eq!(a.plan().unwrap().active_env(), Some("0"));
        assert_eq!(LiveArgs::default().plan().unwrap().active_env(), None);
    }
}
