//! The unpaired study's quality: every memlens run's profile judged against the first exact run
//! of its unwinder.
use super::configs::{Config, Setup};
use super::runner::{ConfigRuns, Run};
use crate::quality::{judge_one, load_runs, RunProfile, Truth, TruthSummary};
use anyhow::Result;
use std::collections::HashMap;
use std::path::PathBuf;

fn unwinder_of(c: &Config) -> Option<&str> {
    match &c.setup {
        Setup::Sampled { unwinder, .. } | Setup::Exact { unwinder } => Some(unwinder),
        _ => None,
    }
}

type Runs = Vec<Vec<(Run, Vec<PathBuf>)>>;

/// Read the profiles of every memlens run, fill in samples and quality, and summarise the truth.
pub fn judge(
    cfgs: &[Config],
    runs: Runs,
) -> Result<(Vec<ConfigRuns>, Vec<TruthSummary>, Option<String>)> {
    let mut out: Vec<ConfigRuns> = Vec::with_capacity(cfgs.len());
    let mut truths: HashMap<String, Truth> = HashMap::new();
    let mut summaries = Vec::new();
    let mut loaded: Vec<Vec<RunProfile>> = Vec::with_capacity(cfgs.len());
    // Load every memlens profile of the workload in one batch (one symbolization pass).
    let mut flat: Vec<Vec<PathBuf>> = Vec::new();
    for (c, rs) in cfgs.iter().zip(&runs) {
        if c.memlens_profile() {
            flat.extend(rs.iter().map(|(_, d)| d.clone()));
        }
    }
    let mut profiles = load_runs(&flat)?.into_iter();
    for (c, rs) in cfgs.iter().zip(&runs) {
        loaded.push(if c.memlens_profile() {
            profiles.by_ref().take(rs.len()).collect()
        } else {
            Vec::new()
        });
    }
    for (c, ps) in cfgs.iter().zip(&loaded) {
        if let (Setup::Exact { unwinder }, Some(first)) = (&c.setup, ps.first()) {
            let t = Truth::of(first);
            summaries.push(t.summary(unwinder));
            truths.insert(unwinder.clone(), t);
        }
    }
    let any_profiles = cfgs.iter().any(|c| c.memlens_profile());
    let note = if any_profiles && truths.is_empty() {
        Some(
            "no exact run (--no-exact): coverage and estimation errors are not measured"
                .to_string(),
        )
    } else {
        None
    };
    for ((c, rs), ps) in cfgs.iter().zip(runs).zip(loaded) {
        let mut v = Vec::with_capacity(rs.len());
        for (i, (mut run, _)) in rs.into_iter().enumerate() {
            if let Some(p) = ps.get(i) {
                run.samples = Some(p.samples);
                run.truncated_share = Some(p.truncated_share());
                if let Some(t) = unwinder_of(c).and_then(|u| truths.get(u)) {
                    run.quality = Some(judge_one(t, p));
                }
            }
            v.push(run);
        }
        out.push(ConfigRuns {
            config: c.clone(),
            runs: v,
        });
    }
    Ok((out, summaries, note))
}
