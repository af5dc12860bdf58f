//! A profile as the endpoints serve it: the shape Go's `net/http/pprof` gives its heap profiles, so
//! that engines which tell a snapshot from a delta by the profile alone (Parca, Pyroscope) store it
//! right without any configuration of theirs.
//!
//! * Sample types `alloc_objects/count, alloc_space/bytes, inuse_objects/count, inuse_space/bytes`
//!   in that order, period type `space/bytes`, period the sampling interval: what Go writes.
//! * A snapshot (`/heap`, `/allocs` without `seconds`) has no duration; a window (`?seconds=N`) has
//!   the duration between its two dumps, and its time is the end dump's (Go's `serveDeltaProfile`).
//! * `/allocs` names `alloc_space` the default sample type (Go's `allocs` profile does); `/heap`
//!   leaves it unset (pprof then shows the last type, `inuse_space`), as Go does.
//! * Every location has a function: what the symbolizer could not name is `module+0xOFFSET`, and
//!   every mapping with locations says it has functions, so `go tool pprof` never needs the
//!   `/debug/pprof/symbol` round trip (C++ frames in a stripped libstdc++, for one).
//! * Nothing in a sample's identity changes between two scrapes: its stack and its string labels
//!   (service, pid, host, `--label`s). Scrapers that turn cumulative profiles into deltas (Grafana
//!   Alloy) match samples by stack and every label, so a value that changes (the per-stack sample
//!   count, lifetimes) would make each stack new at every scrape and be sent whole again.
//! * memlens' own values (peak, freed, lifetimes, per-stack sample counts) are left out of the
//!   Go-shaped profiles and served whole at `/debug/pprof/lifetimes` (see docs/serve.md for which
//!   engines show them).
use anyhow::Result;
use memlens_profile::proto;
use memlens_profile::{Function, Line, Profile, SampleIndex};
use std::collections::HashMap;
use std::io::Write;

/// Which profile an endpoint serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `/debug/pprof/heap`: a snapshot, no default sample type.
    Heap,
    /// `/debug/pprof/allocs`: a snapshot, `alloc_space` by default.
    Allocs,
    /// `?seconds=N` of either: the difference of two dumps, with their duration.
    Window { allocs: bool, duration_ns: u64 },
    /// `/debug/pprof/lifetimes`: a snapshot with every memlens value (what `memlens run` writes).
    Lifetimes,
    /// What `--push` sends Pyroscope: a window's allocations and the heap at its end (0: a first
    /// window, with no allocations).
    Push { duration_ns: u64 },
}

impl Kind {
    /// The `Content-Disposition` file name Go gives the same profile.
    pub fn file_name(self) -> &'static str {
        match self {
            Kind::Heap => "heap",
            Kind::Allocs => "allocs",
            Kind::Window { allocs: true, .. } => "allocs-delta",
            Kind::Window { allocs: false, .. } => "heap-delta",
            Kind::Lifetimes => "lifetimes",
            Kind::Push { .. } => "push",
        }
    }
}

/// Give every location at least one line: unsymbolized ones get a function named after their
/// module and file offset (`libstdc++.so.6+0xd44a2`, or the bare address outside any module), and
/// every mapping that has locations is marked as having functions.
pub fn name_every_location(p: &mut Profile) {
    let mut by_name: HashMap<String, u64> = p
        .functions
        .iter()
        .enumerate()
        .map(|(i, f)| (f.name.clone(), i as u64 + 1))
        .collect();
    for i in 0..p.locations.len() {
        if !p.locations[i].lines.is_empty() {
            continue;
        }
        let name = p.address_name(&p.locations[i]);
        let next = p.functions.len() as u64 + 1;
        let id = *by_name.entry(name.clone()).or_insert(next);
        if id == next {
            p.functions.push(Function {
                system_name: name.clone(),
                name,
                ..Function::default()
            });
        }
        p.locations[i].lines.push(Line {
            function: id,
            line: 0,
        });
    }
    for l in &p.locations {
        if let Some(m) = p.mappings.get_mut((l.mapping as usize).wrapping_sub(1)) {
            m.has_functions = true;
        }
    }
}

/// The gzipped pprof bytes of `p` served as `kind`, with `labels` on every sample (engines group
/// by them) and in a comment.
pub fn encode(p: &Profile, kind: Kind, labels: &[(String, String)]) -> Result<Vec<u8>> {
    use prost::Message;
    let go_shaped = kind != Kind::Lifetimes;
    let mut m = if go_shaped {
        let mut p = p.clone();
        for s in &mut p.samples {
            s.life = None;
            // The `samples` count label grows at every scrape: a scraper that keys deltas by stack
            // and labels (Alloy) would take each stack for a new one and send its whole cumulative
            // value again. The Go-shaped profiles carry only labels that never change.
            s.samples = 0;
        }
        p.views = None;
        memlens_profile::to_proto(&p)
    } else {
        memlens_profile::to_proto(p)
    };
    let mut ids: HashMap<String, i64> = m
        .string_table
        .iter()
        .enumerate()
        .map(|(i, s)| (s.clone(), i as i64))
        .collect();
    let mut id = |m: &mut proto::Profile, s: &str| -> i64 {
        *ids.entry(s.to_string()).or_insert_with(|| {
            m.string_table.push(s.to_string());
            m.string_table.len() as i64 - 1
        })
    };
    let pairs: Vec<(i64, i64)> = labels
        .iter()
        .map(|(k, v)| (id(&mut m, k), id(&mut m, v)))
        .collect();
    for s in &mut m.sample {
        for &(key, str) in &pairs {
            s.label.push(proto::Label {
                key,
                str,
                num: 0,
                num_unit: 0,
            });
        }
    }
    let text: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let c = id(&mut m, &format!("memlens serve: {}", text.join(" ")));
    m.comment.push(c);
    m.time_nanos = p.meta.time_ns as i64;
    (m.duration_nanos, m.default_sample_type) = match kind {
        Kind::Heap => (0, 0),
        Kind::Allocs => (0, id(&mut m, SampleIndex::AllocSpace.name())),
        Kind::Window {
            allocs,
            duration_ns,
        } => (
            // A zero duration would read as a snapshot: a window lasts at least a nanosecond.
            duration_ns.max(1) as i64,
            if allocs {
                id(&mut m, SampleIndex::AllocSpace.name())
            } else {
                0
            },
        ),
        Kind::Lifetimes => (0, id(&mut m, SampleIndex::InuseSpace.name())),
        Kind::Push { duration_ns } => (duration_ns as i64, 0),
    };
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&m.encode_to_vec())?;
    Ok(gz.finish()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use memlens_profile::{Location, Mapping, Sample};
    use std::io::Read;

    /// Two locations in a mapping of `libx.so` (file offset 0x1000): the first symbolized as `f`,
    /// the second not; one sample with lifetimes.
    fn profile() -> Profile {
        let mut p = Profile::default();
        p.meta.time_ns = 5_000_000_000;
        p.meta.start_ns = 1_000_000_000;
        p.meta.interval = 65536;
        p.mappings.push(Mapping {
            start: 0x7000_0000,
            limit: 0x7001_0000,
            offset: 0x1000,
            filename: "/lib/libx.so".into(),
            ..Mapping::default()
        });
        p.functions.push(Function {
            name: "f".into(),
            ..Function::default()
        });
        p.locations.push(Location {
            mapping: 1,
            address: 0x7000_0010,
            lines: vec![Line {
                function: 1,
                line: 3,
            }],
        });
        p.locations.push(Location {
            mapping: 1,
            address: 0x7000_0234,
            lines: Vec::new(),
        });
        let mut s = Sample {
            locations: vec![1, 2],
            samples: 1,
            life: Some(Box::default()),
            ..Sample::default()
        };
        s.set_values([1.0, 100.0, 1.0, 100.0]);
        p.samples.push(s);
        p
    }

    fn decode(gz: &[u8]) -> proto::Profile {
        use prost::Message;
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(gz)
            .read_to_end(&mut raw)
            .unwrap();
        proto::Profile::decode(&raw[..]).unwrap()
    }

    fn types(m: &proto::Profile) -> Vec<String> {
        m.sample_type
            .iter()
            .map(|t| {
                format!(
                    "{}/{}",
                    m.string_table[t.r#type as usize], m.string_table[t.unit as usize]
                )
            })
            .collect()
    }

    #[test]
    fn snapshots_have_no_duration_and_windows_have_theirs() {
        let p = profile();
        let go = [
            "alloc_objects/count",
            "alloc_space/bytes",
            "inuse_objects/count",
            "inuse_space/bytes",
        ];
        for (kind, duration, default) in [
            (Kind::Heap, 0, ""),
            (Kind::Allocs, 0, "alloc_space"),
            (
                Kind::Window {
                    allocs: true,
                    duration_ns: 2_000_000_000,
                },
                2_000_000_000,
                "alloc_space",
            ),
            (
                Kind::Window {
                    allocs: false,
                    duration_ns: 2_000_000_000,
                },
                2_000_000_000,
                "",
            ),
        ] {
            let m = decode(&encode(&p, kind, &[]).unwrap());
            assert_eq!(m.duration_nanos, duration, "{kind:?}");
            assert_eq!(m.time_nanos, 5_000_000_000, "{kind:?}");
            assert_eq!(types(&m), go, "{kind:?}");
            let st = &m.string_table;
            assert_eq!(st[m.default_sample_type as usize], default, "{kind:?}");
            let pt = m.period_type.as_ref().unwrap();
            assert_eq!(
                (
                    st[pt.r#type as usize].as_str(),
                    st[pt.unit as usize].as_str()
                ),
                ("space", "bytes")
            );
            assert_eq!(m.period, 65536);
            assert!(m.sample.iter().all(|s| s.value.len() == 4));
        }
        // The lifetimes endpoint keeps memlens' own values after Go's four.
        let m = decode(&encode(&p, Kind::Lifetimes, &[]).unwrap());
        assert_eq!(m.duration_nanos, 0);
        assert_eq!(&types(&m)[..4], go);
        assert!(types(&m).contains(&"peak_space/bytes".to_string()));
    }

    #[test]
    fn every_location_gets_a_function_and_every_mapping_says_so() {
        let mut p = profile();
        name_every_location(&mut p);
        assert!(p.mappings[0].has_functions);
        let names: Vec<String> = p
            .frames(&p.samples[0])
            .into_iter()
            .map(|f| f.function)
            .collect();
        // 0x7000_0234 - start + file offset 0x1000
        assert_eq!(names, ["f", "libx.so+0x1234"]);
        // Twice is the same as once.
        let n = p.functions.len();
        name_every_location(&mut p);
        assert_eq!(p.functions.len(), n);
        assert!(p.locations.iter().all(|l| l.lines.len() == 1));
    }

    /// The labels of every sample of a served profile, as (key, str, num, num_unit) strings.
    fn label_sets(m: &proto::Profile) -> Vec<Vec<(String, String, i64, String)>> {
        let st = &m.string_table;
        m.sample
            .iter()
            .map(|s| {
                s.label
                    .iter()
                    .map(|l| {
                        let t = |i: i64| st[i as usize].clone();
                        (t(l.key), t(l.str), l.num, t(l.num_unit))
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_stack_keeps_its_labels_from_one_scrape_to_the_next() {
        let labels = vec![("service".to_string(), "srv".to_string())];
        let first = profile();
        let mut later = profile();
        later.samples[0].samples = 7;
        later.samples[0].set_values([9.0, 900.0, 2.0, 200.0]);
        for kind in [
            Kind::Heap,
            Kind::Allocs,
            Kind::Window {
                allocs: true,
                duration_ns: 1,
            },
        ] {
            let a = label_sets(&decode(&encode(&first, kind, &labels).unwrap()));
            let b = label_sets(&decode(&encode(&later, kind, &labels).unwrap()));
            assert_eq!(a, b, "{kind:?}");
            assert!(a[0].iter().all(|l| l.2 == 0), "no numeric label: {a:?}");
        }
        // The lifetimes endpoint keeps the per-stack sample count.
        let m = decode(&encode(&later, Kind::Lifetimes, &labels).unwrap());
        assert!(label_sets(&m)[0]
            .iter()
            .any(|l| l.0 == "samples" && l.2 == 7));
    }

    #[test]
    fn labels_on_every_sample() {
        let labels = vec![("service".to_string(), "redis-server".to_string())];
        let m = decode(&encode(&profile(), Kind::Heap, &labels).unwrap());
        let st = &m.string_table;
        let l = &m.sample[0].label;
        assert!(l
            .iter()
            .any(|l| st[l.key as usize] == "service" && st[l.str as usize] == "redis-server"));
        assert!(m
            .comment
            .iter()
            .any(|&c| st[c as usize] == "memlens serve: service=redis-server"));
    }
}
