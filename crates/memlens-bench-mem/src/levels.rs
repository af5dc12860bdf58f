//! Plateau detection on a latency curve: the levels of the memory hierarchy as the benchmark sees
//! them, set beside the cache sizes the machine declares.
use memlens_measure::sysinfo::Cache;
use memlens_measure::units::format_size;
use serde::Serialize;

/// A run of working sets with about the same latency.
#[derive(Debug, Clone, Serialize)]
pub struct Level {
    pub from_ws: u64,
    pub to_ws: u64,
    pub points: usize,
    pub ns: f64,
    pub cycles: f64,
    /// The smallest declared cache that holds the level's largest working set, e.g. "L2 512K";
    /// "beyond L3 (memory)" past the last level.
    pub fits_in: String,
}

/// Points within this relative distance of a level's median latency belong to it.
const TOLERANCE: f64 = 0.15;

fn median(v: &[f64]) -> f64 {
    memlens_measure::stats::quantile(v, 0.5)
}

/// Group `(ws, ns, cycles)` points (sorted by ws) into plateaus of at least two points; points on the
/// slope between two plateaus are left out.
pub fn detect(points: &[(u64, f64, f64)], caches: &[Cache]) -> Vec<Level> {
    let mut runs: Vec<Vec<(u64, f64, f64)>> = Vec::new();
    for &p in points {
        match runs.last_mut() {
            Some(run)
                if {
                    let m = median(&run.iter().map(|q| q.1).collect::<Vec<_>>());
                    (p.1 - m).abs() <= TOLERANCE * m
                } =>
            {
                run.push(p)
            }
            _ => runs.push(vec![p]),
        }
    }
    runs.into_iter()
        .filter(|r| r.len() >= 2)
        .map(|r| {
            let to_ws = r.last().map(|p| p.0).unwrap_or(0);
            Level {
                from_ws: r[0].0,
                to_ws,
                points: r.len(),
                ns: median(&r.iter().map(|p| p.1).collect::<Vec<_>>()),
                cycles: median(&r.iter().map(|p| p.2).collect::<Vec<_>>()),
                fits_in: fits_in(to_ws, caches),
            }
        })
        .collect()
}

fn fits_in(ws: u64, caches: &[Cache]) -> String {
    match caches.iter().find(|c| c.size_bytes >= ws) {
        Some(c) => format!("L{} {}", c.level, format_size(c.size_bytes)),
        None => match caches.last() {
            Some(c) => format!("beyond L{} {} (memory)", c.level, format_size(c.size_bytes)),
            None => "no caches declared in sysfs".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_three_plateaus_and_names_caches() {
        let caches = vec![
            Cache {
                level: 1,
                kind: "Data".into(),
                size_bytes: 32 << 10,
                line_bytes: 64,
            },
            Cache {
                level: 2,
                kind: "Unified".into(),
                size_bytes: 512 << 10,
                line_bytes: 64,
            },
        ];
        let pts: Vec<(u64, f64, f64)> = [
            1.0, 1.1, 1.0, 1.05, 2.5, 4.0, 4.2, 4.1, 30.0, 80.0, 85.0, 88.0,
        ]
        .iter()
        .enumerate()
        .map(|(i, &ns)| ((4u64 << 10) << i, ns, ns * 2.25))
        .collect();
        let l = detect(&pts, &caches);
        assert_eq!(l.len(), 3, "{l:?}");
        assert_eq!(l[0].fits_in, "L1 32K");
        assert_eq!(l[1].fits_in, "L2 512K");
        assert!(l[2].fits_in.starts_with("beyond L2"));
        assert!((l[2].ns - 85.0).abs() < 1e-9);
    }
}
