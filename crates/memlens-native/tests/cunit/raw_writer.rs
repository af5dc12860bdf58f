//! The raw dump writer (runtime/src/control/dump.c) against the reader (memlens-profile's raw.rs),
//! field by field: `runtime/tests/unit/dump_test.c` fills the runtime's tables with chosen values
//! (edges included) and writes two dumps with the real writer, printing what it had in memory;
//! here the dumps are read with the reader every memlens command uses, and each field must be what
//! runtime/README.md says the writer makes of that memory. The harness runs from a directory whose
//! name holds a space, a backslash and a newline (paths are escaped in a dump), and with a run
//! directory, so the state file the same runtime wrote is rendered by state.rs and must agree too.
use crate::cbuild;
use memlens_profile::{read_raw, RawDump};
use std::collections::HashMap;
use std::path::Path;

/// What the harness printed: its facts, and per dump its own block of lines.
struct Expect {
    top: Vec<Vec<String>>,
    dumps: [Vec<Vec<String>>; 2],
}

fn parse_expect(out: &str) -> Expect {
    let mut e = Expect {
        top: Vec::new(),
        dumps: [Vec::new(), Vec::new()],
    };
    let mut cur = 0;
    for l in out.lines() {
        let w: Vec<String> = l.split_whitespace().map(str::to_string).collect();
        match w.first().map(String::as_str) {
            Some("dump") => cur = w[1].parse().unwrap(),
            Some(_) if cur == 0 => e.top.push(w),
            Some(_) => e.dumps[cur - 1].push(w),
            None => {}
        }
    }
    e
}

fn unhex(h: &str) -> Vec<u8> {
    if h == "-" {
        return Vec::new();
    }
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
        .collect()
}

fn num<T: std::str::FromStr>(s: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    let t = s.trim_start_matches("0x");
    if s.starts_with("0x") {
        // only u64 fields are written in hex
        let v = u64::from_str_radix(t, 16).unwrap();
        return v.to_string().parse().unwrap();
    }
    s.parse().unwrap()
}

/// The harness's lines of one kind.
fn lines<'a>(ls: &'a [Vec<String>], key: &str) -> Vec<&'a [String]> {
    ls.iter().filter(|w| w[0] == key).map(|w| &w[1..]).collect()
}

fn one<'a>(ls: &'a [Vec<String>], key: &str) -> &'a [String] {
    let v = lines(ls, key);
    assert_eq!(v.len(), 1, "one '{key}' line expected");
    v[0]
}

/// A count the writer prints as u64 and the reader keeps as i64: saturated.
fn sat(v: u64) -> i64 {
    v.min(i64::MAX as u64) as i64
}

/// The header and the counters, as the harness had them.
fn check_header(d: &RawDump, e: &Expect, round: usize, exe: &str) {
    let m = &d.meta;
    assert_eq!(m.exe, exe, "exe (escaped and unescaped)");
    assert_eq!(String::from_utf8_lossy(&unhex(&one(&e.top, "exe")[0])), exe);
    assert_eq!(m.pid, num::<u32>(&one(&e.top, "pid")[0]));
    assert_eq!(m.ppid, num::<u32>(&one(&e.top, "ppid")[0]));
    let c = one(&e.top, "config");
    assert_eq!(m.interval, num::<u64>(&c[0]));
    assert_eq!(m.unwinder, c[1]);
    assert_eq!(m.active, c[2] == "1");
    assert_eq!(m.reason, if round == 1 { "ctl" } else { "exit" });
    assert_eq!(m.start_ns, num::<u64>(&one(&e.top, "start_ns")[0]));
    let t = one(&e.dumps[round - 1], "time");
    assert!(
        (num::<u64>(&t[0])..=num::<u64>(&t[1])).contains(&m.time_ns),
        "time_ns {} outside {t:?}",
        m.time_ns
    );
    let k: Vec<u64> = one(&e.top, "counters").iter().map(|v| num(v)).collect();
    let got = [
        m.truncated,
        m.dropped,
        m.unwind_fallbacks,
        m.max_depth as u64,
        m.dropped_bytes,
        m.max_stacks,
        m.table_full,
        m.untracked,
    ];
    assert_eq!(got.to_vec(), k, "truncated dropped unwind_fallbacks max_depth dropped_bytes max_stacks table_full untracked");
    let cost = one(&e.dumps[round - 1], "cost");
    assert_eq!(m.cost.sampled_ns, num::<u64>(&cost[0]), "cost_ns");
    assert_eq!(m.cost.calls, num::<u64>(&cost[1]), "cost_calls");
    assert!(
        (num::<u64>(&cost[2])..=num::<u64>(&cost[3])).contains(&m.cost.cpu_ns),
        "cpu_ns {} outside {cost:?}",
        m.cost.cpu_ns
    );
}

/// Key of a stack: its frames and truncation flag.
type Key = (Vec<u64>, u64);

/// The stacks: every one the harness had with something to count is there, once, with its counts
/// as the format says (live counts below zero written as 0, counts past i64 saturated by the
/// reader), its `life` line, and the header's `samples` is their sum.
fn check_stacks(d: &RawDump, e: &Expect, round: usize) {
    let exp = &e.dumps[round - 1];
    let (st, life) = (lines(exp, "stack"), lines(exp, "life"));
    assert_eq!(st.len(), life.len());
    let mut got: HashMap<Key, &memlens_profile::RawStack> = HashMap::new();
    for s in &d.stacks {
        let dup = got.insert((s.pcs.clone(), s.flags), s);
        assert!(dup.is_none(), "stack written twice: {:?}", s.pcs);
    }
    let (mut written, mut total) = (0, 0u64);
    for (s, l) in st.iter().zip(&life) {
        let v: Vec<u64> = s[..3].iter().map(|x| num(x)).collect();
        let (ifx, ib): (i64, i64) = (num(&s[3]), num(&s[4]));
        let key: Key = (s[6..].iter().map(|x| num(x)).collect(), num(&s[5]));
        if v[0] == 0 && v[1] == 0 && ifx == 0 && ib == 0 {
            assert!(
                !got.contains_key(&key),
                "a stack with nothing to count was written"
            );
            continue;
        }
        let r = got
            .get(&key)
            .unwrap_or_else(|| panic!("stack {key:?} missing from dump {round}"));
        written += 1;
        total += v[0];
        let want = (v[0], sat(v[1]), sat(v[2]), ifx.max(0), ib.max(0));
        let have = (
            r.samples,
            r.alloc_objects_fx,
            r.alloc_bytes,
            r.inuse_objects_fx,
            r.inuse_bytes,
        );
        assert_eq!(
            have, want,
            "stack {key:?}: samples alloc_fx alloc_bytes inuse_fx inuse_bytes"
        );
        let rl = r.life.as_ref().expect("a life line after every stack line");
        let lv: Vec<i64> = l.iter().map(|x| num(x)).collect();
        assert_eq!((rl.peak_objects_fx, rl.peak_bytes), (lv[0], lv[1]), "peak");
        assert!(
            (lv[2] as u64..=lv[3] as u64).contains(&rl.age_ticks),
            "age {} outside {:?}",
            rl.age_ticks,
            &lv[2..4]
        );
        assert_eq!(rl.prev_inuse_bytes, lv[4], "inuse at the previous dump");
        let freed: Vec<u64> = lv[5..].iter().map(|&x| x as u64).collect();
        assert_eq!(rl.freed, freed, "freed bytes by lifetime decade");
    }
    assert_eq!(d.stacks.len(), written, "stacks written");
    assert!(written > 200, "the harness's stacks were not written");
    assert_eq!(d.meta.samples, total, "header samples = sum of the stacks'");
    assert!(
        got.keys().any(|k| k.0.len() == 128),
        "a stack of 128 frames"
    );
    assert!(got.keys().any(|k| k.0.is_empty()), "a stack of no frame");
}

/// Modules: every one the harness saw loaded (and the one it dlclose'd, as unloaded), with its
/// path, base, segments, and the build ID of its file.
fn check_modules(d: &RawDump, e: &Expect) {
    let mut exp: Vec<(u64, bool, String, Vec<[String; 4]>)> = Vec::new();
    for w in &e.top {
        match w[0].as_str() {
            "module" => exp.push((
                num(&w[1]),
                w[2] == "loaded",
                String::from_utf8_lossy(&unhex(&w[3])).into_owned(),
                Vec::new(),
            )),
            "segment" => exp.last_mut().unwrap().3.push([
                w[1].clone(),
                w[2].clone(),
                w[3].clone(),
                w[4].clone(),
            ]),
            _ => {}
        }
    }
    assert!(exp.iter().any(|m| !m.1), "the harness unloaded nothing");
    assert_eq!(d.modules.len(), exp.len(), "modules: {:#?}", d.modules);
    for (base, loaded, path, segs) in &exp {
        let m = d
            .modules
            .iter()
            .find(|m| m.base == *base && &m.path == path)
            .unwrap_or_else(|| panic!("module {path} at {base:#x} missing: {:#?}", d.modules));
        assert_eq!(m.loaded, *loaded, "{path}");
        let have: Vec<[String; 4]> = m
            .segments
            .iter()
            .map(|s| {
                [
                    format!("{:#x}", s.vaddr),
                    format!("{:#x}", s.memsz),
                    format!("{:#x}", s.offset),
                    s.flags.clone(),
                ]
            })
            .collect();
        assert_eq!(&have, segs, "{path}: segments");
        if Path::new(path).is_file() {
            let id = memlens_profile::file_build_id(path)
                .unwrap()
                .unwrap_or_default();
            assert_eq!(m.build_id, id, "{path}: build id");
        }
    }
}

fn check_views(d: &RawDump, e: &Expect, round: usize) {
    let v = d.views.as_ref().expect("view lines");
    let w = one(&e.top, "views");
    assert_eq!(v.enabled, w[0] == "1");
    assert_eq!((v.heap, v.heap_max), (num(&w[1]), num(&w[2])));
    assert_eq!(v.heap_max_ns, 0, "heap_max's time: its tick was 0");
    assert_eq!((v.peak, v.peak_ns), (num(&w[3]), num(&w[4])));
    assert_eq!(v.allocator, w[5]);
    assert!(v.life_decades, "view life_decades 1");
    assert!(
        v.tsc_hz > 100_000_000 && v.tsc_hz < 100_000_000_000,
        "tsc_hz {}",
        v.tsc_hz
    );
    let mut tl: Vec<[i64; 6]> = lines(&e.top, "tl")
        .iter()
        .map(|p| std::array::from_fn(|i| num(&p[i])))
        .collect();
    // each dump adds a point of its own: its time, the heap, RSS, the allocator's figures unknown
    for r in 0..round {
        let p = one(&e.dumps[r], "tl-dump");
        let dumped = &v.timeline[tl.len()];
        assert!(
            (num::<i64>(&p[0])..=num::<i64>(&p[1])).contains(&dumped[0]),
            "the dump's timeline point at {} outside {p:?}",
            dumped[0]
        );
        assert_eq!(dumped[1], num::<i64>(&p[2]), "the dump's point: heap");
        assert!(dumped[2] > 0, "the dump's point: RSS");
        assert_eq!(
            &dumped[3..],
            &[-1, -1, 0],
            "the dump's point: allocator figures unknown, no anonymous mappings"
        );
        tl.push(*dumped);
    }
    assert_eq!(v.timeline, tl);
}

/// Runs the harness from a directory with a hostile name: what it printed, and what it wrote.
fn run_harness(tmp: &Path) -> (Expect, cbuild::DumpRun) {
    let home = tmp.join("dir with space\\x41 and\nnewline");
    let d = cbuild::dump_harness(
        tmp,
        &home,
        &[
            ("MEMLENS_INTERVAL", "64K"),
            ("MEMLENS_UNWINDER", "fp"),
            ("MEMLENS_MAX_DEPTH", "128"),
        ],
    );
    (parse_expect(&d.stdout), d)
}

/// Two dumps the C writer wrote, read by raw.rs: every field as the harness had it in memory.
#[test]
fn every_field_reads_back_as_written() {
    let tmp = tempfile::tempdir().unwrap();
    let (e, h) = run_harness(tmp.path());
    let (out, exe) = (&h.out, h.exe.to_string_lossy().into_owned());
    for round in [1, 2] {
        let path = out.join(if round == 1 {
            "first.raw"
        } else {
            "second.raw"
        });
        let d = read_raw(&path).unwrap_or_else(|err| panic!("{}: {err:#}", path.display()));
        check_header(&d, &e, round, &exe);
        check_stacks(&d, &e, round);
        check_modules(&d, &e);
        check_views(&d, &e, round);
        let maps =
            String::from_utf8_lossy(&unhex(&one(&e.dumps[round - 1], "maps")[0])).into_owned();
        assert_eq!(d.maps, maps.lines().collect::<Vec<_>>(), "maps, verbatim");
    }
}

/// The state file the same runtime kept (state.c), rendered by state.rs, says what the last dump
/// said: the header, every stack's counts and lifetimes, the views and the timeline, and modules
/// that agree with the dump's (it lists those known at start-up and those its frames lie in).
#[test]
fn the_state_file_agrees_with_the_dump() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, h) = run_harness(tmp.path());
    let text = memlens_profile::render_state(&h.state, "exit", None).unwrap();
    let s = memlens_profile::parse_raw(&text).unwrap();
    let d = read_raw(&h.out.join("second.raw")).unwrap();
    let (a, b) = (&s.meta, &d.meta);
    assert_eq!(
        (a.pid, a.ppid, &a.exe, a.interval, &a.unwinder, a.active),
        (b.pid, b.ppid, &b.exe, b.interval, &b.unwinder, b.active)
    );
    // the state's start is taken when its file is made, a moment before ml_init takes the dump's
    assert!(
        a.start_ns.abs_diff(b.start_ns) < 1_000_000_000,
        "start_ns {} vs {}",
        a.start_ns,
        b.start_ns
    );
    assert_eq!(
        (
            a.samples,
            a.truncated,
            a.dropped,
            a.unwind_fallbacks,
            a.max_depth,
            a.dropped_bytes
        ),
        (
            b.samples,
            b.truncated,
            b.dropped,
            b.unwind_fallbacks,
            b.max_depth,
            b.dropped_bytes
        )
    );
    assert_eq!(
        (a.max_stacks, a.table_full, a.untracked),
        (b.max_stacks, b.table_full, b.untracked)
    );
    let by_key = |x: &RawDump| -> HashMap<Key, memlens_profile::RawStack> {
        x.stacks
            .iter()
            .map(|s| ((s.pcs.clone(), s.flags), s.clone()))
            .collect()
    };
    let (ss, ds) = (by_key(&s), by_key(&d));
    assert_eq!(ss.len(), ds.len());
    for (k, x) in &ss {
        let y = &ds[k];
        assert_eq!(
            (
                x.samples,
                x.alloc_objects_fx,
                x.alloc_bytes,
                x.inuse_objects_fx,
                x.inuse_bytes
            ),
            (
                y.samples,
                y.alloc_objects_fx,
                y.alloc_bytes,
                y.inuse_objects_fx,
                y.inuse_bytes
            ),
            "{k:?}"
        );
        let (lx, ly) = (x.life.as_ref().unwrap(), y.life.as_ref().unwrap());
        assert_eq!(
            (lx.peak_objects_fx, lx.peak_bytes, &lx.freed),
            (ly.peak_objects_fx, ly.peak_bytes, &ly.freed)
        );
    }
    let (vs, vd) = (s.views.unwrap(), d.views.unwrap());
    assert_eq!(
        (vs.enabled, vs.heap, vs.heap_max, vs.peak, vs.peak_ns),
        (vd.enabled, vd.heap, vd.heap_max, vd.peak, vd.peak_ns)
    );
    assert_eq!(vs.timeline, vd.timeline);
    assert!(!s.modules.is_empty());
    for m in &s.modules {
        let n = d
            .modules
            .iter()
            .find(|n| n.base == m.base && n.path == m.path)
            .unwrap_or_else(|| panic!("state module {} not in the dump", m.path));
        assert_eq!(
            (&m.build_id, m.loaded, &m.segments),
            (&n.build_id, n.loaded, &n.segments)
        );
    }
}
