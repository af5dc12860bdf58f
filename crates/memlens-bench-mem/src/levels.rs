//! Plateau detection on a latency curve: the levels of the memory hierarchy as the benchmark sees
//! them, named from the cache sizes the machine declares *and* the reach of its TLBs, since a step in
//! latency may come from either (a random chase over 512 KiB on 4 KiB pages misses a 64-entry L1 DTLB
//! while the data still sits in a 2 MiB L2).
use memlens_measure::sysinfo::{Cache, Tlb};
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
    /// The smallest declared cache that holds the level's largest working set, e.g. "L2 1M";
    /// "DRAM" past the last level.
    pub cache: String,
    /// Where the level's largest working set stands against the TLBs for the pages in use:
    /// "" within the L1 DTLB's reach, else which reach it exceeds.
    pub tlb: String,
    /// The limit (cache size or TLB reach) crossed between this level and the next, if any:
    /// what ends the plateau.
    pub ends_at: Option<String>,
    /// The name shown: cache, then TLB, then what ends it, e.g.
    /// "L2 1M, beyond L1 DTLB reach 384K; ends at L2 TLB reach 512K".
    pub fits_in: String,
}

/// Points within this relative distance of a level's median latency belong to it.
const TOLERANCE: f64 = 0.15;

fn median(v: &[f64]) -> f64 {
    memlens_measure::stats::quantile(v, 0.5)
}

/// A size limit of the hierarchy: a cache's capacity or a TLB's reach.
struct Limit {
    bytes: u64,
    name: String,
}

/// The TLBs that map pages of `page` bytes, smallest level first.
fn tlbs_for(tlbs: &[Tlb], page: u64) -> Vec<&Tlb> {
    let mut v: Vec<&Tlb> = tlbs.iter().filter(|t| t.page_bytes == page).collect();
    v.sort_by_key(|t| t.level);
    v
}

fn tlb_name(t: &Tlb) -> String {
    format!(
        "L{} {}TLB reach {}",
        t.level,
        if t.kind == "Data" { "D" } else { "" },
        format_size(t.reach())
    )
}

/// Bytes of last-level page table entries (8 bytes per page) that a working set of `ws` bytes needs:
/// past the TLBs' reach every load walks them, so where they fit matters as much as the data.
fn page_tables(ws: u64, page: u64) -> u64 {
    ws / page.max(1) * 8
}

fn limits(caches: &[Cache], tlbs: &[&Tlb], page: u64) -> Vec<Limit> {
    let last_reach = tlbs.iter().map(|t| t.reach()).max();
    let mut v: Vec<Limit> = caches
        .iter()
        .map(|c| Limit {
            bytes: c.size_bytes,
            name: format!("L{} {}", c.level, format_size(c.size_bytes)),
        })
        .chain(tlbs.iter().map(|t| Limit {
            bytes: t.reach(),
            name: tlb_name(t),
        }))
        // The working set whose page tables fill each cache, where page walks happen at all.
        .chain(caches.iter().filter_map(|c| {
            let ws = c.size_bytes * (page / 8);
            (last_reach? < ws).then(|| Limit {
                bytes: ws,
                name: format!(
                    "page tables outgrow L{} {}",
                    c.level,
                    format_size(c.size_bytes)
                ),
            })
        }))
        .collect();
    v.sort_by_key(|l| l.bytes);
    v
}

/// "page tables 512K in L2 1M" (or "beyond L3 32M"): where the walks of a working set find them.
fn page_table_home(ws: u64, page: u64, caches: &[Cache]) -> String {
    let pt = page_tables(ws, page);
    match caches.iter().find(|c| c.size_bytes >= pt) {
        Some(c) => format!(
            "page tables {} in L{} {}",
            format_size(pt),
            c.level,
            format_size(c.size_bytes)
        ),
        None => match caches.last() {
            Some(c) => format!(
                "page tables {} beyond L{} {}",
                format_size(pt),
                c.level,
                format_size(c.size_bytes)
            ),
            None => format!("page tables {}", format_size(pt)),
        },
    }
}

/// Name the level whose largest working set is `to` and after which the next level starts at
/// `next` (None: the last level).
fn name(
    to: u64,
    next: Option<u64>,
    caches: &[Cache],
    tlbs: &[&Tlb],
    page: u64,
) -> (String, String, Option<String>) {
    let cache = match caches.iter().find(|c| c.size_bytes >= to) {
        Some(c) => format!("L{} {}", c.level, format_size(c.size_bytes)),
        None if caches.is_empty() => "no caches declared in sysfs".into(),
        None => "DRAM".into(),
    };
    // The largest TLB reach the working set exceeds: past it, loads need page walks.
    let tlb = match tlbs.iter().rev().find(|t| t.reach() < to) {
        Some(t) if Some(t) == tlbs.last() => format!(
            "beyond {} (page walks; {})",
            tlb_name(t),
            page_table_home(to, page, caches)
        ),
        Some(t) => format!("beyond {}", tlb_name(t)),
        None => String::new(),
    };
    // A limit between this level's largest working set and the next level's smallest one.
    let ends_at = next.and_then(|n| {
        limits(caches, tlbs, page)
            .into_iter()
            .filter(|l| l.bytes >= to && l.bytes < n)
            .map(|l| l.name)
            .reduce(|a, b| format!("{a} / {b}"))
    });
    (cache, tlb, ends_at)
}

/// Group `(ws, ns, cycles)` points (sorted by ws) into plateaus of at least two points; points on the
/// slope between two plateaus are left out. `page` is the page size the lists were mapped with
/// (4 KiB, or 2 MiB with huge pages), which picks the TLB entries that apply.
pub fn detect(points: &[(u64, f64, f64)], caches: &[Cache], tlbs: &[Tlb], page: u64) -> Vec<Level> {
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
    let runs: Vec<Vec<(u64, f64, f64)>> = runs.into_iter().filter(|r| r.len() >= 2).collect();
    let tlbs = tlbs_for(tlbs, page);
    runs.iter()
        .enumerate()
        .map(|(i, r)| {
            let to_ws = r.last().map(|p| p.0).unwrap_or(0);
            let next = runs.get(i + 1).map(|n| n[0].0);
            let (cache, tlb, ends_at) = name(to_ws, next, caches, &tlbs, page);
            let mut fits_in = cache.clone();
            if !tlb.is_empty() {
                fits_in = format!("{fits_in}, {tlb}");
            }
            // "L1 32K; ends at L1 32K" says nothing new.
            if let Some(e) = ends_at.as_ref().filter(|e| **e != cache) {
                fits_in = format!("{fits_in}; ends at {e}");
            }
            Level {
                from_ws: r[0].0,
                to_ws,
                points: r.len(),
                ns: median(&r.iter().map(|p| p.1).collect::<Vec<_>>()),
                cycles: median(&r.iter().map(|p| p.2).collect::<Vec<_>>()),
                cache,
                tlb,
                ends_at,
                fits_in,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(level: u32, size: u64) -> Cache {
        Cache {
            level,
            kind: if level == 1 { "Data" } else { "Unified" }.into(),
            size_bytes: size,
            line_bytes: 64,
        }
    }

    fn tlb(level: u32, page: u64, entries: u64) -> Tlb {
        Tlb {
            level,
            kind: if level == 1 { "Data" } else { "Unified" }.into(),
            page_bytes: page,
            entries,
        }
    }

    /// A Sandy-Bridge-like machine: L1 32K, L2 2M, L3 32M; 64-entry L1 DTLB and 512-entry L2 TLB
    /// on 4 KiB pages (reach 256K and 2M), 32 entries for 2 MiB pages.
    fn machine() -> (Vec<Cache>, Vec<Tlb>) {
        (
            vec![cache(1, 32 << 10), cache(2, 2 << 20), cache(3, 32 << 20)],
            vec![
                tlb(1, 4 << 10, 64),
                tlb(2, 4 << 10, 512),
                tlb(1, 2 << 20, 32),
            ],
        )
    }

    /// Latency steps at 32K (L1), 256K (L1 DTLB reach), 2M (L2 cache and L2 TLB reach), 32M (L3).
    fn curve() -> Vec<(u64, f64, f64)> {
        let ns = [
            1.0, 1.0, 1.0, 1.0, 1.0, 4.0, 4.1, 4.0, 8.0, 8.1, 8.0, 30.0, 31.0, 30.5, 31.0, 100.0,
            101.0, 100.0,
        ];
        ns.iter()
            .enumerate()
            .map(|(i, &v)| ((2u64 << 10) << i, v, v * 2.5))
            .collect()
    }

    #[test]
    fn plateaus_are_named_from_caches_tlb_reach_and_dram() {
        let (c, t) = machine();
        let l = detect(&curve(), &c, &t, 4 << 10);
        let names: Vec<&str> = l.iter().map(|l| l.fits_in.as_str()).collect();
        assert_eq!(l.len(), 5, "{names:#?}");
        // 2K–32K: in L1, nothing in the way; the L1 size ends it.
        assert_eq!(l[0].fits_in, "L1 32K");
        assert_eq!(l[0].ends_at.as_deref(), Some("L1 32K"));
        assert_eq!((l[0].from_ws, l[0].to_ws), (2 << 10, 32 << 10));
        // 64K–256K: in L2, within the L1 DTLB's reach, which ends it — not the 2M L2.
        assert_eq!(l[1].fits_in, "L2 2M; ends at L1 DTLB reach 256K");
        assert_eq!(l[1].ends_at.as_deref(), Some("L1 DTLB reach 256K"));
        // 512K–2M: still L2 (same cache as the level before), told apart by the TLB.
        assert_eq!(l[2].cache, "L2 2M");
        assert_eq!(l[2].tlb, "beyond L1 DTLB reach 256K");
        assert_eq!(l[2].ends_at.as_deref(), Some("L2 2M / L2 TLB reach 2M"));
        // 4M–32M: L3, every load a page walk.
        assert_eq!(l[3].cache, "L3 32M");
        assert_eq!(
            l[3].tlb,
            "beyond L2 TLB reach 2M (page walks; page tables 64K in L2 2M)"
        );
        assert_eq!(l[3].ends_at.as_deref(), Some("L3 32M"));
        // Past the last cache: DRAM, not "L3" again.
        assert_eq!(l[4].cache, "DRAM");
        assert_eq!(
            l[4].fits_in,
            "DRAM, beyond L2 TLB reach 2M (page walks; page tables 512K in L2 2M)"
        );
        assert!(l[4].ends_at.is_none());
        assert!((l[4].ns - 100.0).abs() < 1e-9);
    }

    #[test]
    fn dram_plateaus_are_told_apart_by_where_the_page_tables_fit() {
        // Past 1G on 4 KiB pages the page tables (2M and more) outgrow the 2M L2: walks go to L3.
        let (c, t) = machine();
        let pts: Vec<(u64, f64, f64)> = [100.0, 101.0, 100.0, 130.0, 131.0, 130.0]
            .iter()
            .enumerate()
            .map(|(i, &v)| ((256u64 << 20) << i, v, v * 2.5))
            .collect();
        let l = detect(&pts, &c, &t, 4 << 10);
        assert_eq!(l.len(), 2, "{l:#?}");
        assert_eq!(l[0].ends_at.as_deref(), Some("page tables outgrow L2 2M"));
        assert!(
            l[0].tlb.ends_with("page tables 2M in L2 2M)"),
            "{}",
            l[0].tlb
        );
        assert!(
            l[1].tlb.ends_with("page tables 16M in L3 32M)"),
            "{}",
            l[1].tlb
        );
        assert_ne!(l[0].fits_in, l[1].fits_in);
    }

    #[test]
    fn huge_pages_use_the_2m_entries() {
        let (c, t) = machine();
        let l = detect(&curve(), &c, &t, 2 << 20);
        // 32 × 2 MiB = 64M of reach: every cache level is within it, DRAM (to 256M) is not.
        assert!(l[..4].iter().all(|l| l.tlb.is_empty()), "{l:#?}");
        assert_eq!(
            l[4].fits_in,
            "DRAM, beyond L1 DTLB reach 64M (page walks; page tables 1K in L1 32K)"
        );
    }

    #[test]
    fn no_tlb_declared_names_caches_only() {
        let (c, _) = machine();
        let l = detect(&curve(), &c, &[], 4 << 10);
        assert_eq!(l[1].fits_in, "L2 2M");
        assert_eq!(l[4].fits_in, "DRAM");
    }
}
