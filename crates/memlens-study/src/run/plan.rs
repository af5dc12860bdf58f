//! The schedule of further processes: after the first ones, the configurations whose 95%
//! interval is still wider than its target get further processes (or further rounds of whole
//! processes), the cheapest needs first, while the time limit allows. Pure: tested on its own.

/// A further process for a cell: its configurations and rounds, and the wall time it will take.
#[derive(Debug, Clone, PartialEq)]
pub struct Extension {
    /// Index of the cell (workload × kind of process).
    pub cell: usize,
    /// Configurations (indices into the cell's) to run.
    pub confs: Vec<usize>,
    /// Rounds.
    pub rounds: u32,
    /// Expected wall time, s.
    pub seconds: f64,
}

/// What a cell still needs: its configurations still wider than the target with the rounds each
/// needs, the wall time a process takes beyond its blocks, and its block length (s).
pub type Need = (Vec<(usize, u32)>, f64, f64);

/// Plan the next further processes within `budget_s` seconds. Pure: `needs` is, per cell, what it
/// still needs ([`Need`]). Each cell that misses gets a process over just those configurations
/// (rounds = the most any of them needs), or two: those that need less than a third of the
/// neediest's rounds get a shorter one of their own. The cheapest processes are funded first, so
/// as many targets as possible are met, and the first that does not fit gets the time left, if
/// that buys at least 8 rounds.
pub fn plan_extensions(needs: &[Need], budget_s: f64) -> Vec<Extension> {
    let cost = |k: usize, rounds: u32, over: f64, block_s: f64| {
        over + (rounds as f64 * (2 * k + 1) as f64 + (k + 1) as f64) * block_s
    };
    let mut all: Vec<Extension> = Vec::new();
    for (cell, (m, over, block_s)) in needs.iter().enumerate() {
        let most = m.iter().map(|x| x.1).max().unwrap_or(0);
        for heavy in [true, false] {
            let part: Vec<&(usize, u32)> =
                m.iter().filter(|x| (x.1 * 3 >= most) == heavy).collect();
            let Some(rounds) = part.iter().map(|x| x.1).max() else {
                continue;
            };
            all.push(Extension {
                cell,
                confs: part.iter().map(|x| x.0).collect(),
                rounds,
                seconds: cost(part.len(), rounds, *over, *block_s),
            });
        }
    }
    all.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    let mut left = budget_s;
    let mut out = Vec::new();
    for mut e in all {
        if e.seconds <= left {
            left -= e.seconds;
            out.push(e);
            continue;
        }
        let k = e.confs.len();
        let (_, over, block_s) = needs[e.cell];
        // (a cell's shorter process, if any, came before: it was cheaper)
        let fit = ((left - cost(k, 0, over, block_s)) / ((2 * k + 1) as f64 * block_s)).floor();
        if fit >= 8.0 {
            e.rounds = fit as u32;
            e.seconds = cost(k, e.rounds, over, block_s);
            out.push(e);
        }
        break;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extensions_fund_the_cheapest_needs_first_within_the_time() {
        // cell 0: met; cell 1: one configuration needs 100 rounds (3 blocks each); cell 2: two
        // need 50 and 400 rounds — each gets a process of its own (3 blocks a round); 10 ms
        // blocks, 0.5 s start-up each.
        let needs = vec![
            (vec![], 0.5, 0.01),
            (vec![(0, 100)], 0.5, 0.01),
            (vec![(0, 50), (3, 400)], 0.5, 0.01),
        ];
        let all = plan_extensions(&needs, 100.0);
        let got: Vec<(usize, Vec<usize>, u32)> = all
            .iter()
            .map(|e| (e.cell, e.confs.clone(), e.rounds))
            .collect();
        // cheapest first: cell 2's short process, cell 1, cell 2's long one
        assert_eq!(
            got,
            [(2, vec![0], 50), (1, vec![0], 100), (2, vec![3], 400)]
        );
        assert!((all[1].seconds - (0.5 + (300.0 + 2.0) * 0.01)).abs() < 1e-9);
        // 10 s: the first two fit whole (2.02 + 3.52 s); the last gets what is left, whole rounds
        let some = plan_extensions(&needs, 10.0);
        assert_eq!(some.len(), 3);
        assert_eq!(
            some[2].rounds,
            ((10.0 - 2.02 - 3.52 - 0.5 - 0.02) / 0.03f64).floor() as u32
        );
        assert!(some.iter().map(|e| e.seconds).sum::<f64>() <= 10.0 + 1e-9);
        // no time: nothing; fewer than 8 rounds fit: nothing
        assert!(plan_extensions(&needs, 0.0).is_empty());
        assert!(plan_extensions(&needs, 0.6).is_empty());
        // configurations that need about as many rounds share one process
        let both = plan_extensions(&[(vec![(1, 300), (2, 120)], 0.5, 0.01)], 100.0);
        assert_eq!((both[0].confs.clone(), both[0].rounds), (vec![1, 2], 300));
        // a service's blocks are runs of its load: 20 rounds of 3 blocks of 0.2 s
        let svc = plan_extensions(&[(vec![(0, 20)], 1.0, 0.2)], 100.0);
        assert!((svc[0].seconds - (1.0 + 62.0 * 0.2)).abs() < 1e-9);
    }
}
