//! One configuration of a study, as `memlens study --json` writes it: the JSON contract scripts
//! rely on (docs/study.md, `memlens study`), the same for both engines — `rows[]` of the paired study,
//! `workloads[].rows[]` of the unpaired one. What only one engine measures is its own columns
//! (`E`), written beside the contract's fields in the same object.
use serde::{Deserialize, Serialize};

/// One configuration's row. A field an engine does not measure, or that does not apply to the
/// configuration, is null.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row<E> {
    /// Workload name (`synthetic-2t`, `pipeline-llc`, …).
    pub workload: String,
    /// Configuration name (`memlens fp 512K`, `jemalloc prof 512K`, `off`).
    pub config: String,
    /// Sampling interval, bytes (null when the configuration does not sample at an interval).
    pub interval_bytes: Option<u64>,
    /// memlens unwinder (null for the other profilers and the references).
    pub unwinder: Option<String>,
    /// Measured in alternating blocks of one process (true), or in separate processes (false).
    pub paired: bool,
    /// Overhead against the configuration's reference, percent: the median over rounds (paired)
    /// or repeats (unpaired) of the per-round or per-repeat ratio − 1 (null for a reference).
    pub overhead_pct: Option<f64>,
    /// Bootstrap 95% interval of that median, low end.
    pub ci_low_pct: Option<f64>,
    /// Bootstrap 95% interval of that median, high end.
    pub ci_high_pct: Option<f64>,
    /// Direct cost: excess time of the ticks that took a sample, percent of the time at the off
    /// rate (paired pipeline, memlens).
    pub direct_cost_pct: Option<f64>,
    /// Indirect cost: excess time of the ticks just after a sample (paired pipeline, memlens).
    pub indirect_cost_pct: Option<f64>,
    /// Share of the exact truth's allocated bytes whose stack the profile found, percent.
    pub coverage_pct: Option<f64>,
    /// Error of the estimated total allocated bytes, percent of the truth's.
    pub total_error_pct: Option<f64>,
    /// Largest absolute error among the truth's top stacks, percent.
    pub top_error_pct: Option<f64>,
    /// Samples in the profile (unpaired: the median over repeats, rounded half to even).
    pub samples: Option<u64>,
    /// Truncated stacks among the samples, percent.
    pub truncated_pct: Option<f64>,
    /// The engine's own columns.
    #[serde(flatten)]
    pub engine: E,
}

/// The contract's fields (docs/study.md's list), in the order it gives them.
#[cfg(test)]
pub(crate) const CONTRACT: [&str; 15] = [
    "workload",
    "config",
    "interval_bytes",
    "unwinder",
    "paired",
    "overhead_pct",
    "ci_low_pct",
    "ci_high_pct",
    "coverage_pct",
    "direct_cost_pct",
    "indirect_cost_pct",
    "total_error_pct",
    "top_error_pct",
    "samples",
    "truncated_pct",
];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, Value};

    /// A reader that knows the contract only (what a script sees).
    type AnyEngine = Row<Map<String, Value>>;

    #[test]
    fn a_row_written_by_either_engine_reads_back_through_the_contract() {
        let row = Row {
            workload: "pipeline-l2".to_string(),
            config: "memlens fp 64K".to_string(),
            interval_bytes: Some(65536),
            unwinder: Some("fp".into()),
            paired: true,
            overhead_pct: Some(1.5),
            ci_low_pct: Some(-0.5),
            ci_high_pct: Some(3.0),
            direct_cost_pct: None,
            indirect_cost_pct: None,
            coverage_pct: Some(99.5),
            total_error_pct: Some(-2.0),
            top_error_pct: Some(4.0),
            samples: Some(340),
            truncated_pct: Some(0.0),
            engine: Map::from_iter([("rounds".to_string(), Value::from(4))]),
        };
        let v = serde_json::to_value(&row).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        for k in CONTRACT {
            assert!(keys.contains(&k), "{k} missing from {v}");
        }
        assert_eq!(keys.len(), CONTRACT.len() + 1, "{v}");
        // samples is a count: an integer in the JSON, whichever engine wrote it
        assert_eq!(v["samples"], Value::from(340u64));
        assert!(v["direct_cost_pct"].is_null());
        let back: AnyEngine = serde_json::from_value(v).unwrap();
        assert_eq!(back, row);
    }
}
