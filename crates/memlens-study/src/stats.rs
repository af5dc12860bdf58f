//! Paired-in-time statistics: each configuration block against the `off` blocks beside it.
use crate::estimate::Estimate;
use memlens_workloads::Block;
use serde::{Deserialize, Serialize};

/// Rounds a configuration still needs for its interval to shrink to `target` points (half
/// width): the width falls as 1/√rounds, so `n · ((hw/target)² − 1)`, with 10% to spare and at
/// least 8 (0 when the target is met).
pub fn rounds_needed(e: &Estimate, target: f64) -> u32 {
    let hw = e.half_width();
    if hw <= target || e.n == 0 {
        return 0;
    }
    let more = e.n as f64 * ((hw / target).powi(2) * 1.1 - 1.0);
    (more.ceil() as u32).clamp(8, 100_000)
}

/// Counter deltas per tick of one configuration, by class of tick.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CountSplit {
    /// Per tick, the two events, over the ticks that took a sample.
    pub sampled: [f64; 2],
    /// Over the ticks just after a sample.
    pub after: [f64; 2],
    /// Over the ticks far from any sample.
    pub far: [f64; 2],
    /// Ticks the split rests on.
    pub ticks: u64,
}

/// Per configuration (index 0 = off), the counter deltas per tick by class, from every block that
/// carries counts. `None` for a configuration without any.
pub fn count_split(blocks: &[Block], configs: usize) -> Vec<Option<CountSplit>> {
    let mut sums = vec![([0f64; 6], [0u64; 3]); configs + 1];
    for b in blocks {
        let (Some(c), Some(s), Some(a)) = (b.counts, b.sampled, b.after) else {
            continue;
        };
        let Some(x) = sums.get_mut(b.config as usize) else {
            continue;
        };
        for (y, v) in x.0.iter_mut().zip(c) {
            *y += v as f64;
        }
        x.1[0] += s.0;
        x.1[1] += a.0;
        x.1[2] += b.ticks.saturating_sub(s.0 + a.0);
    }
    sums.into_iter()
        .map(|(c, t)| {
            let per = |k: usize| {
                let n = t[k].max(1) as f64;
                [c[2 * k] / n, c[2 * k + 1] / n]
            };
            (t.iter().sum::<u64>() > 0).then(|| CountSplit {
                sampled: per(0),
                after: per(1),
                far: per(2),
                ticks: t.iter().sum(),
            })
        })
        .collect()
}

/// Per-round paired values of one configuration, in percent.
#[derive(Debug, Clone, Default)]
pub struct Paired {
    /// Block mean over its neighbouring off blocks' mean, − 1.
    pub overhead: Vec<f64>,
    /// Same for the p99 of the block (pipeline).
    pub p99: Vec<f64>,
    /// Excess time of the ticks that sampled, over the block's time at the off rate.
    pub direct: Vec<f64>,
    /// Excess time of the ticks just after a sample.
    pub indirect: Vec<f64>,
    /// Share of ticks that sampled.
    pub sampled_share: Vec<f64>,
    /// The runtime's own account: its sampled path's time over the block, percent of the
    /// process's CPU time at the off rate (the neighbouring off blocks' mean).
    pub own: Vec<f64>,
}

/// Pair every configuration block with the off blocks beside it (the schedule puts one on each
/// side). Returns the per-round values by configuration number (index 0 unused).
pub fn pair(blocks: &[Block], configs: usize) -> Vec<Paired> {
    let mut out = vec![Paired::default(); configs + 1];
    for (i, b) in blocks.iter().enumerate() {
        if b.config == 0 || b.config as usize > configs || i == 0 || i + 1 >= blocks.len() {
            continue;
        }
        let (l, r) = (&blocks[i - 1], &blocks[i + 1]);
        if l.config != 0 || r.config != 0 || b.ticks == 0 || l.ticks == 0 || r.ticks == 0 {
            continue;
        }
        let base = (l.mean() + r.mean()) / 2.0;
        let p = &mut out[b.config as usize];
        p.overhead.push((b.mean() / base - 1.0) * 100.0);
        if let (Some(q), Some(ql), Some(qr)) = (b.quantiles, l.quantiles, r.quantiles) {
            p.p99.push((q[1] / ((ql[1] + qr[1]) / 2.0) - 1.0) * 100.0);
        }
        if let (Some(s), Some(a)) = (b.sampled, b.after) {
            let at_base = base * b.ticks as f64;
            p.direct
                .push((s.1 as f64 - s.0 as f64 * base) / at_base * 100.0);
            p.indirect
                .push((a.1 as f64 - a.0 as f64 * base) / at_base * 100.0);
            p.sampled_share.push(s.0 as f64 / b.ticks as f64 * 100.0);
        }
        if let (Some(o), Some(ol), Some(or)) = (b.own, l.own, r.own) {
            let cpu = (ol.1 + or.1) as f64 / 2.0;
            if cpu > 0.0 {
                p.own.push(o.0 as f64 / cpu * 100.0);
            }
        }
    }
    out
}

impl Paired {
    /// Add the rounds of another process (each round is paired inside its own process, so rounds
    /// of separate processes pool).
    pub fn extend(&mut self, o: Paired) {
        self.overhead.extend(o.overhead);
        self.p99.extend(o.p99);
        self.direct.extend(o.direct);
        self.indirect.extend(o.indirect);
        self.sampled_share.extend(o.sampled_share);
        self.own.extend(o.own);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::estimate;
    use memlens_workloads::schedule;

    /// Blocks following the real schedule, with a drifting machine speed (×1 … ×2 over the run),
    /// noise, and configuration c slowed by `effect[c]` percent.
    fn synthetic(effect: &[f64], rounds: u32) -> Vec<Block> {
        let mut x = 12345u64;
        let sched = schedule(effect.len() - 1, rounds, 3);
        let n = sched.len() as f64;
        sched
            .iter()
            .enumerate()
            .map(|(i, &(round, config))| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let noise = 1.0 + ((x % 1000) as f64 / 1000.0 - 0.5) * 0.04;
                let drift = 1.0 + i as f64 / n;
                let mean = 100.0 * drift * noise * (1.0 + effect[config as usize] / 100.0);
                Block {
                    round,
                    config,
                    ticks: 1000,
                    cycles: (mean * 1000.0) as u64,
                    ..Block::default()
                }
            })
            .collect()
    }

    #[test]
    fn injected_slowdown_is_recovered_within_its_interval() {
        let p = pair(&synthetic(&[0.0, 10.0, 0.0], 100), 2);
        let e = estimate(&p[1].overhead).unwrap();
        assert!(e.lo <= 10.0 && 10.0 <= e.hi, "{e:?}");
        assert!(e.half_width() < 2.0, "{e:?}");
        assert_eq!(e.n, 100);
        // the null configuration: its interval contains 0 and excludes the real effect
        let z = estimate(&p[2].overhead).unwrap();
        assert!(z.lo <= 0.0 && 0.0 <= z.hi && z.hi < 5.0, "{z:?}");
        assert!(!e.overlaps(&z));
    }

    #[test]
    fn drift_alone_is_not_an_overhead() {
        // Unpaired, the 2x drift would look like a large effect; paired it cancels.
        let p = pair(&synthetic(&[0.0, 0.0], 30), 1);
        let e = estimate(&p[1].overhead).unwrap();
        assert!(e.lo <= 0.0 && 0.0 <= e.hi, "{e:?}");
    }

    #[test]
    fn direct_and_indirect_split_the_excess() {
        let off = |round| Block {
            round,
            config: 0,
            ticks: 100,
            cycles: 10_000,
            sampled: Some((0, 0)),
            after: Some((0, 0)),
            quantiles: Some([100.0, 100.0, 100.0]),
            counts: Some([0, 0, 0, 0, 300, 400]),
            own: Some((0, 1000)),
        };
        // 100 ticks at 100 cycles, except 2 sampled ticks at 600 and 8 after them at 150.
        let on = Block {
            round: 0,
            config: 1,
            ticks: 100,
            cycles: 90 * 100 + 2 * 600 + 8 * 150,
            sampled: Some((2, 1200)),
            after: Some((8, 1200)),
            quantiles: Some([100.0, 150.0, 600.0]),
            counts: Some([20, 4, 40, 8, 90, 180]),
            own: Some((50, 1100)),
        };
        let p = pair(&[off(0), on.clone(), off(0)], 1);
        assert!((p[1].overhead[0] - 14.0).abs() < 1e-9);
        assert!((p[1].direct[0] - 10.0).abs() < 1e-9);
        assert!((p[1].indirect[0] - 4.0).abs() < 1e-9);
        assert!((p[1].p99[0] - 50.0).abs() < 1e-9);
        // the runtime's own account: 50 ns of its sampled path over 1000 ns of CPU at the off rate
        assert!((p[1].own[0] - 5.0).abs() < 1e-9);
        assert!(estimate(&[]).is_none());
        // counters per tick by class: 2 sampled, 8 after, 90 far ticks; off: 200 far ticks
        let c = count_split(&[off(0), on, off(0)], 1);
        let (c0, c1) = (c[0].unwrap(), c[1].unwrap());
        assert_eq!((c0.far, c0.ticks), ([3.0, 4.0], 200));
        assert_eq!(
            (c1.sampled, c1.after, c1.far),
            ([10.0, 2.0], [5.0, 1.0], [1.0, 2.0])
        );
    }

    #[test]
    fn rounds_needed_follow_the_square_root_law() {
        let e = |hw: f64, n| Estimate {
            pct: 10.0,
            lo: 10.0 - hw,
            hi: 10.0 + hw,
            n,
        };
        assert_eq!(rounds_needed(&e(1.5, 40), 2.0), 0);
        // twice too wide: 4x the rounds (+10%), i.e. 136 more than 40
        assert_eq!(rounds_needed(&e(4.0, 40), 2.0), 136);
        assert_eq!(rounds_needed(&e(2.1, 40), 2.0), 9);
        assert_eq!(rounds_needed(&e(2.01, 400), 2.0), 45);
    }
}
