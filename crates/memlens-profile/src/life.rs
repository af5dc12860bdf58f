//! The runtime's view records (peak set, lifetimes, live ages, timeline) → the model, and the peak
//! profile derived from a profile that has them.
use crate::model::{Life, Profile, Sample, TimePoint, Views, LIFE_BOUNDS_NS, LIFE_BUCKETS};
use crate::raw::{RawLife, RawViews};
use std::path::{Path, PathBuf};

/// Tick range `[lo, hi)` of an older runtime's lifetime bucket `k` (factor 4 per bucket above
/// 2^lg0).
fn tick_range(k: usize, lg0: u32, last: bool) -> (f64, f64) {
    let hi = 2f64.powi((lg0 + 2 * k as u32) as i32);
    let lo = hi / 4.0;
    if last {
        (lo, hi * 4.0) // open bucket: assume one more factor
    } else {
        (lo, hi)
    }
}

/// Spread `bytes` freed between `lo` and `hi` ns over the decades, uniformly in log time (older
/// runtimes only: their buckets straddle the decades, so this guesses how bytes split).
fn spread(out: &mut [f64; LIFE_BUCKETS], lo: f64, hi: f64, bytes: f64) {
    let (a, b) = (lo.max(1.0).ln(), hi.max(lo.max(1.0) * 1.0001).ln());
    let mut edges = vec![f64::NEG_INFINITY];
    edges.extend(LIFE_BOUNDS_NS.iter().map(|x| x.ln()));
    edges.push(f64::INFINITY);
    for k in 0..LIFE_BUCKETS {
        let (x, y) = (edges[k].max(a), edges[k + 1].min(b));
        if y > x {
            out[k] += bytes * (y - x) / (b - a);
        }
    }
}

/// One stack's `life` line in model units (ns instead of ticks). The runtime buckets lifetimes by
/// the model's decades, which are taken as they are; an older runtime's tick buckets are spread
/// over them.
pub fn life_of(r: &RawLife, views: Option<&RawViews>) -> Life {
    let tsc_hz = views.map_or(0, |v| v.tsc_hz);
    let ns_per_tick = if tsc_hz > 0 { 1e9 / tsc_hz as f64 } else { 1.0 };
    let mut freed = [0.0; LIFE_BUCKETS];
    let n = r.freed.len();
    if views.is_some_and(|v| v.life_decades) {
        for (k, &b) in r.freed.iter().enumerate() {
            freed[k.min(LIFE_BUCKETS - 1)] += b as f64;
        }
    } else {
        let lg0 = views.map_or(12, |v| v.life_lg0);
        for (k, &b) in r.freed.iter().enumerate() {
            if b > 0 {
                let (lo, hi) = tick_range(k, lg0, k + 1 == n);
                spread(&mut freed, lo * ns_per_tick, hi * ns_per_tick, b as f64);
            }
        }
    }
    Life {
        peak_objects: r.peak_objects_fx as f64 / 65536.0,
        peak_bytes: r.peak_bytes as f64,
        freed,
        live_age_ns: r.age_ticks as f64 * ns_per_tick,
        prev_inuse_bytes: r.prev_inuse_bytes as f64,
    }
}

/// The process-wide `view` and `tl` lines in model units.
pub fn views_of(r: &RawViews) -> Views {
    Views {
        heap_bytes: r.heap as f64,
        heap_max_bytes: r.heap_max as f64,
        heap_max_ns: r.heap_max_ns,
        peak_bytes: r.peak as f64,
        peak_ns: r.peak_ns,
        split_peak_bytes: r
            .split
            .map_or(0.0, |[a, b]| (a.0 as f64 + b.0 as f64) / 2.0),
        split_peak_ns: r.split.map_or(0, |[a, b]| a.1.max(b.1)),
        allocator: r.allocator.clone(),
        disabled: !r.enabled,
        timeline: r
            .timeline
            .iter()
            .copied()
            .map(TimePoint::from_raw)
            .collect(),
    }
}

/// The live set at the heap's high-water mark as a profile of its own: `inuse_*` are the values at
/// the peak, `alloc_*` stay cumulative up to the dump. None when the profile has no peak set.
pub fn peak_profile(p: &Profile) -> Option<Profile> {
    let v = p.views.as_ref()?;
    if v.peak_bytes <= 0.0 {
        return None;
    }
    // Everything but the samples (cloning those only to replace them cost a copy of the profile).
    let mut q = Profile {
        meta: p.meta.clone(),
        mappings: p.mappings.clone(),
        functions: p.functions.clone(),
        locations: p.locations.clone(),
        samples: Vec::new(),
        views: None,
    };
    q.meta.view = "peak".into();
    q.meta.time_ns = v.peak_ns;
    q.samples = p
        .samples
        .iter()
        .filter_map(|s| {
            let l = s.life.as_ref()?;
            (l.peak_bytes > 0.0).then(|| Sample {
                inuse_objects: l.peak_objects,
                inuse_bytes: l.peak_bytes,
                life: None,
                ..s.clone()
            })
        })
        .collect();
    Some(q)
}

/// `<stem>.peak.pb.gz` beside `<stem>.pb.gz`.
pub fn peak_path(out: &Path) -> PathBuf {
    let mut p = crate::pprof::profile_stem(out).into_os_string();
    p.push(".peak.pb.gz");
    PathBuf::from(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw_views(decades: bool) -> RawViews {
        RawViews {
            tsc_hz: 1_000_000_000,
            life_lg0: 12,
            life_decades: decades,
            ..RawViews::default()
        }
    }

    #[test]
    fn decades_are_taken_as_they_are() {
        // Blocks that lived 1.4 s are in the runtime's [1 s, 10 s) bucket, and nowhere else: the
        // median is that decade, and nothing is labelled as freed before 1 s.
        let mut r = RawLife {
            freed: vec![0; 10],
            ..RawLife::default()
        };
        r.freed[7] = 1000;
        r.freed[3] = 10;
        let l = life_of(&r, Some(&raw_views(true)));
        assert_eq!(l.freed[7], 1000.0);
        assert_eq!(l.freed[3], 10.0);
        assert_eq!(l.freed_within(1e9), 10.0);
        assert_eq!(l.median_range_ns(), Some((1e9, 1e10)));
        assert_eq!(l.median_ns(), Some(1e10));
        r.freed[9] = 5000; // the open last decade: at least 100 s
        let l = life_of(&r, Some(&raw_views(true)));
        assert_eq!(l.median_range_ns(), Some((1e11, f64::INFINITY)));
        assert_eq!(l.median_ns(), Some(1e11));
        r.freed = vec![7, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            life_of(&r, Some(&raw_views(true))).median_range_ns(),
            Some((0.0, 1e3))
        );
    }

    #[test]
    fn old_tick_buckets_are_spread_over_decades() {
        // 1 GHz: bucket k spans [2^(10+2k), 2^(12+2k)) ns; bucket 5 = [1 Mi, 4 Mi) ns ⊂ [1 ms, 10 ms).
        let mut r = RawLife {
            freed: vec![0; 16],
            ..RawLife::default()
        };
        r.freed[5] = 1000;
        let l = life_of(&r, Some(&raw_views(false)));
        assert!((l.freed[4] - 997.0).abs() < 10.0, "{:?}", l.freed);
        assert!((l.freed_total() - 1000.0).abs() < 1e-6);
        assert_eq!(l.median_range_ns(), Some((1e6, 1e7)));
        assert_eq!(l.freed_within(1e6), l.freed[..=3].iter().sum::<f64>());
    }

    #[test]
    fn peak_path_is_beside() {
        assert_eq!(
            peak_path(Path::new("/x/a.pb.gz")),
            PathBuf::from("/x/a.peak.pb.gz")
        );
        assert_eq!(peak_path(Path::new("a")), PathBuf::from("a.peak.pb.gz"));
        assert_eq!(peak_path(Path::new("a.pb")), PathBuf::from("a.peak.pb.gz"));
        let stem = crate::pprof::profile_stem;
        assert_eq!(stem(Path::new("d/prof.pb.gz")), PathBuf::from("d/prof"));
        assert_eq!(stem(Path::new("prof.gz")), PathBuf::from("prof"));
        assert_eq!(stem(Path::new("prof")), PathBuf::from("prof"));
    }
}
