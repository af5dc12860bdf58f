//! The one recommendation rule of the study (docs/study.md, "The recommendation"): which interval to
//! use with an unwinder on a workload whose profile quality was judged, from the rows' overhead
//! intervals and coverage — whichever schedule measured them. A pure function of the rows, so
//! that two studies whose overheads differ only by noise give the same answer.
use crate::model::{Advice, Basis, Candidate, Recommendation, Row, Settings};

/// The interval to use — a rule built to give the same answer on two runs whose overheads differ
/// only by noise. It never ranks intervals by their point estimates:
///
/// 1. Qualifying intervals: coverage ≥ `min_coverage` (unknown coverage does not qualify).
/// 2. The *cheapest* is the qualifying interval with the lowest upper CI end (the best cost any
///    interval is proven to stay under).
/// 3. Eligible: a qualifying interval whose upper CI end is within `budget` (proven affordable), or
///    whose CI reaches down to the cheapest's upper end (indistinguishable from the cheapest) while
///    its point estimate stays within the budget (no limit when even the cheapest is over it).
/// 4. Recommend the smallest eligible interval (the most detail).
///
/// So when noise makes every interval's interval wide, they all tie with the cheapest and the
/// smallest one that covers is chosen, run after run; an interval is passed over only when it is
/// shown to cost more than the cheapest and is not proven affordable.
pub fn recommend(c: &[Candidate], min_coverage: f64, budget: f64) -> Option<Recommendation> {
    let mut ok: Vec<&Candidate> = c
        .iter()
        .filter(|x| x.coverage.is_some_and(|v| v >= min_coverage))
        .collect();
    ok.sort_by_key(|x| x.interval);
    let cheapest = **ok
        .iter()
        .min_by(|a, b| a.overhead.hi.total_cmp(&b.overhead.hi))?;
    let cap = if cheapest.overhead.pct <= budget {
        budget
    } else {
        f64::INFINITY
    };
    ok.iter().find_map(|x| {
        let basis = if x.overhead.hi <= budget {
            Basis::WithinBudget
        } else if x.overhead.lo <= cheapest.overhead.hi && x.overhead.pct <= cap {
            if cap.is_finite() {
                Basis::TiedWithCheapest
            } else {
                Basis::OverBudget
            }
        } else {
            return None;
        };
        Some(Recommendation {
            pick: **x,
            basis,
            cheapest,
        })
    })
}

/// The workloads whose memlens rows have coverage (profile windows), in the study's order.
pub fn judged(s: &Settings, rows: &[Row]) -> Vec<String> {
    s.workloads
        .iter()
        .map(|w| w.name())
        .filter(|w| {
            rows.iter()
                .any(|x| &x.workload == w && x.coverage_pct.is_some())
        })
        .collect()
}

/// The recommendation per judged workload and unwinder, by [`recommend`].
pub fn advise(s: &Settings, rows: &[Row]) -> Vec<Advice> {
    let mut out = Vec::new();
    for w in judged(s, rows) {
        for u in &s.unwinders {
            let cands: Vec<Candidate> = rows
                .iter()
                .filter(|x| x.workload == w && x.unwinder.as_deref() == Some(u))
                .filter_map(|x| {
                    Some(Candidate {
                        interval: x.interval_bytes?,
                        overhead: x.overhead(),
                        coverage: x.coverage_pct,
                    })
                })
                .collect();
            if !cands.is_empty() {
                out.push(Advice {
                    workload: w.clone(),
                    unwinder: u.clone(),
                    recommendation: recommend(&cands, s.min_coverage, s.budget),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::Estimate;

    fn c(interval: u64, pct: f64, hw: f64, cov: Option<f64>) -> Candidate {
        Candidate {
            interval,
            overhead: Estimate {
                pct,
                lo: pct - hw,
                hi: pct + hw,
                n: 10,
            },
            coverage: cov,
        }
    }

    #[test]
    fn recommendation_table() {
        use Basis::*;
        let k = 1024;
        // (candidates, expected interval and basis)
        type Case = (Vec<Candidate>, Option<(u64, Basis)>);
        let cases: Vec<Case> = vec![
            // the smallest interval proven within budget wins
            (
                vec![
                    c(64 * k, 20.0, 2.0, Some(99.0)),
                    c(512 * k, 3.0, 1.0, Some(97.0)),
                    c(2048 * k, 1.0, 1.0, Some(91.0)),
                ],
                Some((512 * k, WithinBudget)),
            ),
            // not proven (upper end 5.5) and shown costlier than the cheapest: passed over
            (
                vec![
                    c(512 * k, 4.5, 1.0, Some(97.0)),
                    c(2048 * k, 1.0, 1.0, Some(95.0)),
                ],
                Some((2048 * k, WithinBudget)),
            ),
            // coverage rules out the cheap one; the only one left is over budget
            (
                vec![
                    c(512 * k, 8.0, 1.0, Some(97.0)),
                    c(2048 * k, 1.0, 1.0, Some(80.0)),
                ],
                Some((512 * k, OverBudget)),
            ),
            // nothing in budget: the smallest tied with the cheapest (64K is clearly dearer)
            (
                vec![
                    c(64 * k, 30.0, 1.0, Some(99.0)),
                    c(256 * k, 9.0, 1.0, Some(95.0)),
                    c(1024 * k, 8.5, 1.0, Some(92.0)),
                ],
                Some((256 * k, OverBudget)),
            ),
            // unknown coverage never qualifies
            (vec![c(512 * k, 1.0, 1.0, None)], None),
            (vec![], None),
        ];
        for (i, (cands, want)) in cases.iter().enumerate() {
            assert_eq!(
                recommend(cands, 90.0, 5.0).map(|x| (x.pick.interval, x.basis)),
                *want,
                "case {i}"
            );
        }
    }

    /// Near-ties: overheads that differ only by noise must give the same answer, whichever
    /// interval happens to have the lowest point estimate and whether or not one of them happens
    /// to be proven within budget.
    #[test]
    fn recommendation_is_stable_under_noise() {
        let k = 1024;
        let cov = [99.0, 98.0, 96.0, 93.0];
        let iv = [64 * k, 128 * k, 256 * k, 512 * k];
        // Three "runs" of the same noisy pipeline (true overhead ~1% everywhere, CIs ±3.5).
        let runs = [
            [1.5, 0.2, 2.1, -0.3],
            [-0.4, 1.9, 0.3, 1.2],
            [2.4, 1.1, -0.9, 0.8],
        ];
        for (i, pcts) in runs.iter().enumerate() {
            let cands: Vec<Candidate> = (0..4)
                .map(|j| c(iv[j], pcts[j], 3.5, Some(cov[j])))
                .collect();
            let rec = recommend(&cands, 90.0, 5.0).unwrap();
            assert_eq!(rec.pick.interval, 64 * k, "run {i}: {rec:?}");
        }
        // A real difference is kept: 64K clearly dearer (+9 ±1) than 512K (+0.8 ±1), in every run.
        for jitter in [-0.4, 0.0, 0.4] {
            let cands = vec![
                c(64 * k, 9.0 + jitter, 1.0, Some(99.0)),
                c(128 * k, 4.6 - jitter, 1.0, Some(98.0)),
                c(512 * k, 0.8 + jitter, 1.0, Some(93.0)),
                c(2048 * k, 0.3 - jitter, 1.0, Some(60.0)),
            ];
            let rec = recommend(&cands, 90.0, 5.0).unwrap();
            assert_eq!(rec.pick.interval, 512 * k, "jitter {jitter}: {rec:?}");
        }
        // Tied with the cheapest but over budget at its point estimate: not chosen.
        let cands = vec![
            c(64 * k, 5.5, 3.0, Some(99.0)),
            c(512 * k, 2.0, 3.5, Some(95.0)),
        ];
        let rec = recommend(&cands, 90.0, 5.0).unwrap();
        assert_eq!(
            (rec.pick.interval, rec.basis),
            (512 * k, Basis::TiedWithCheapest)
        );
    }
}
