//! The raw dump and state file readers (memlens-profile's raw.rs and state.rs) on arbitrary bytes:
//! an error, never a panic, and memory bounded by the input. Property tests (proptest) from three
//! kinds of input: bytes at random, lines shaped like a dump's records with hostile fields, and the
//! dumps and state file the C runtime really wrote (dump_test.c) mutated a few bytes at a time.
//!
//! Each case's heap use is measured on its own thread by a counting allocator: the peak while a
//! reader runs must stay within 32 times the input plus 16 MiB (a reader that trusts a count or a
//! length from the file would allocate what the file claims).
//!
//! `cargo test` runs a bounded number of cases from a fixed seed; run more by hand with
//! `PROPTEST_CASES=100000 cargo test --release -p memlens-native --test cunit readers::`.
use crate::cbuild;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;
use std::sync::OnceLock;

/// The system allocator, counting this thread's live bytes and their peak.
struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(delta: isize) {
    // try_with: a thread being torn down has no counters left, and its frees are not ours to count
    let _ = LIVE.try_with(|l| {
        let v = l.get() + delta;
        l.set(v);
        let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
    });
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counters are plain
// thread-local cells with const initializers, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note(l.size() as isize);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        note(-(l.size() as isize));
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note(l.size() as isize);
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        note(n as isize - l.size() as isize);
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Run `f`, returning its result and the most heap it held at once beyond what was live before.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let r = f();
    (r, (PEAK.with(Cell::get) - base).max(0) as usize)
}

fn bounded(input: usize, peak: usize, what: &str) -> Result<(), TestCaseError> {
    let limit = 32 * input + (16 << 20);
    prop_assert!(
        peak <= limit,
        "{what}: {peak} bytes at once for {input} bytes of input (limit {limit})"
    );
    Ok(())
}

fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// A runner from a fixed seed: the same cases every run (a failure is reproduced by running again).
fn runner() -> TestRunner {
    TestRunner::new_with_rng(config(), TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]))
}

/// What the C runtime wrote (dump_test.c, a small stack table): two dumps and a state file.
struct Seeds {
    _dir: tempfile::TempDir,
    raw: Vec<Vec<u8>>,
    state: Vec<u8>,
}

fn seeds() -> &'static Seeds {
    static S: OnceLock<Seeds> = OnceLock::new();
    S.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let h = cbuild::dump_harness(
            dir.path(),
            &dir.path().join("bin"),
            &[("MEMLENS_MAX_STACKS", "1024")],
        );
        Seeds {
            raw: ["first.raw", "second.raw"]
                .iter()
                .map(|f| std::fs::read(h.out.join(f)).unwrap())
                .collect(),
            state: std::fs::read(&h.state).unwrap(),
            _dir: dir,
        }
    })
}

/// A few mutations of `seed` at `edits` (position, kind, value): a byte changed, a run cut out,
/// bytes inserted, a number made huge or negative, the rest cut off.
fn mutate(seed: &[u8], edits: &[(usize, u8, u64)]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for &(pos, kind, v) in edits {
        if b.is_empty() {
            break;
        }
        let at = pos % b.len();
        match kind % 6 {
            0 => b[at] = v as u8,
            1 => {
                let end = (at + 1 + (v as usize % 64)).min(b.len());
                b.drain(at..end);
            }
            2 => {
                let junk = [b"\n", b" ", b"\\", b"-", b"0", b"\x00", b"\xff"][v as usize % 7];
                b.splice(at..at, junk.iter().copied());
            }
            3 => {
                let num = [
                    "18446744073709551616",
                    "-9223372036854775809",
                    "99999999999999999999999",
                    "0x",
                    "-1",
                ][v as usize % 5];
                b.splice(at..at, num.bytes());
            }
            4 => {
                // 8 bytes little-endian (the state file's counts and offsets are words)
                let end = (at + 8).min(b.len());
                let w = [0u64, u64::MAX, 1 << 40, 0x8000_0000, v][v as usize % 5].to_le_bytes();
                b[at..end].copy_from_slice(&w[..end - at]);
            }
            _ => b.truncate(at),
        }
    }
    b
}

fn edits() -> impl Strategy<Value = Vec<(usize, u8, u64)>> {
    prop::collection::vec((any::<usize>(), any::<u8>(), any::<u64>()), 1..8)
}

/// The raw reader on `bytes`, both ways in (a file, and text): no panic, bounded memory.
fn raw_case(bytes: &[u8]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("d.raw");
    std::fs::write(&f, bytes).unwrap();
    let (r, peak) = peak_of(|| memlens_profile::read_raw(&f));
    bounded(bytes.len(), peak, "read_raw")?;
    if let Ok(d) = r {
        // what it accepted holds together: no more stacks than lines
        prop_assert!(d.stacks.len() <= bytes.iter().filter(|&&c| c == b'\n').count());
    }
    let text = String::from_utf8_lossy(bytes);
    let (_, peak) = peak_of(|| memlens_profile::parse_raw(&text));
    bounded(bytes.len(), peak, "parse_raw")
}

/// Field values a dump's lines might carry, hostile ones included.
fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|v| v.to_string()),
        any::<i64>().prop_map(|v| v.to_string()),
        any::<u64>().prop_map(|v| format!("{v:#x}")),
        prop::sample::select(vec![
            "",
            "-",
            "0",
            "-0",
            "0x",
            "0xg",
            "18446744073709551616",
            "-9223372036854775809",
            "1e9",
            "NaN",
            "loaded",
            "unloaded",
            "r-x",
            "\\x0a",
            "\u{fffd}",
            "   ",
        ])
        .prop_map(str::to_string),
    ]
}

/// A line shaped like one of a dump's records, with random fields.
fn record() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "memlens-raw",
        "pid",
        "ppid",
        "exe",
        "interval",
        "unwinder",
        "active",
        "reason",
        "start_ns",
        "time_ns",
        "samples",
        "truncated",
        "dropped",
        "max_depth",
        "cost_ns",
        "module",
        "segment",
        "maps",
        "end maps",
        "stack",
        "life",
        "view",
        "tl",
        "end",
        "future_key",
        "Bad-Key",
    ]);
    (key, prop::collection::vec(field(), 0..20)).prop_map(|(k, f)| {
        let mut l = k.to_string();
        for x in f {
            l.push(' ');
            l.push_str(&x);
        }
        l
    })
}

#[test]
fn raw_reader_takes_random_bytes() {
    runner()
        .run(&prop::collection::vec(any::<u8>(), 0..4096), |b| {
            let mut with_magic = b"memlens-raw 1\n".to_vec();
            with_magic.extend_from_slice(&b);
            raw_case(&b)?;
            raw_case(&with_magic)
        })
        .unwrap();
}

#[test]
fn raw_reader_takes_hostile_records() {
    let lines = prop::collection::vec(record(), 0..80);
    runner()
        .run(&lines, |ls| {
            let text = format!("memlens-raw 1\n{}\n", ls.join("\n"));
            raw_case(text.as_bytes())
        })
        .unwrap();
}

#[test]
fn raw_reader_takes_mutated_real_dumps() {
    let s = seeds();
    for seed in &s.raw {
        memlens_profile::parse_raw(&String::from_utf8_lossy(seed)).expect("the seed itself reads");
    }
    runner()
        .run(&(0..s.raw.len(), edits()), |(i, e)| {
            raw_case(&mutate(&s.raw[i], &e))
        })
        .unwrap();
}

/// The state reader on `bytes` as a file: its header and its rendering as a dump.
fn state_case(bytes: &[u8], dir: &Path) -> Result<(), TestCaseError> {
    let f = dir.join("1.1.state");
    std::fs::write(&f, bytes).unwrap();
    let (_, peak) = peak_of(|| memlens_profile::read_state_info(&f));
    bounded(bytes.len(), peak, "read_state_info")?;
    let (r, peak) = peak_of(|| memlens_profile::render_state(&f, "exit", None));
    bounded(bytes.len(), peak, "render_state")?;
    if let Ok(text) = r {
        // a rendering is a dump the raw reader takes, or refuses with an error
        let _ = memlens_profile::parse_raw(&text);
    }
    Ok(())
}

#[test]
fn state_reader_takes_random_bytes() {
    let dir = tempfile::tempdir().unwrap();
    runner()
        .run(&prop::collection::vec(any::<u8>(), 0..9000), |mut b| {
            state_case(&b, dir.path())?;
            // past the magic and into the directory's place
            let magic = b"memlens-state\n";
            if b.len() >= magic.len() {
                b[..magic.len()].copy_from_slice(magic);
            }
            state_case(&b, dir.path())
        })
        .unwrap();
}

/// The state file's field directory (at byte 2048 of its header page): `name@offset:size` entries.
const DIR_AT: usize = 2048;

fn directory(state: &[u8]) -> Vec<(String, usize, usize)> {
    let text = &state[DIR_AT..4096];
    let end = text.iter().position(|&c| c == 0).unwrap_or(text.len());
    String::from_utf8_lossy(&text[..end])
        .split_whitespace()
        .filter_map(|e| {
            let (n, rest) = e.split_once('@')?;
            let (o, z) = rest.split_once(':')?;
            Some((n.to_string(), o.parse().ok()?, z.parse().ok()?))
        })
        .collect()
}

/// Values a lying header or directory would hold.
fn lie(v: u64, file_len: u64) -> u64 {
    [
        0,
        1,
        3,
        4,
        8,
        9,
        4095,
        4096,
        u32::MAX as u64,
        u64::MAX,
        1 << 40,
        file_len,
        file_len - 1,
        v % (file_len + 64),
    ][(v >> 56) as usize % 14]
}

/// Edits that know the format: a header field set to a lie (a count, an offset, a size), or a
/// directory entry pointing elsewhere or sized otherwise; then a few plain byte edits.
fn mutate_state(
    seed: &[u8],
    fields: &[(usize, bool, u64, u64)],
    bytes: &[(usize, u8, u64)],
) -> Vec<u8> {
    let mut b = seed.to_vec();
    let orig = directory(seed);
    let mut dir = orig.clone();
    let len = seed.len() as u64;
    for &(pick, in_dir, v, w) in fields {
        let i = pick % dir.len();
        let (name, at, size) = &orig[i];
        if in_dir {
            dir[i].1 = lie(v, len) as usize;
            dir[i].2 = lie(w, len).min(1 << 20) as usize;
        } else if name.starts_with("h.") && at + size.min(&8) <= 4096 {
            let size = *size.min(&8);
            b[*at..at + size].copy_from_slice(&lie(v, len).to_le_bytes()[..size]);
        }
    }
    let text: Vec<String> = dir.iter().map(|(n, o, z)| format!("{n}@{o}:{z}")).collect();
    let text = text.join(" ");
    let room = 4096 - DIR_AT - 1;
    let n = text.len().min(room);
    b[DIR_AT..DIR_AT + n].copy_from_slice(&text.as_bytes()[..n]);
    b[DIR_AT + n..4096].fill(0);
    mutate(&b, bytes)
}

#[test]
fn state_reader_takes_mutated_real_state() {
    let s = seeds();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("seed.state");
    std::fs::write(&f, &s.state).unwrap();
    memlens_profile::render_state(&f, "exit", None).expect("the seed itself renders");
    assert!(directory(&s.state).len() > 50, "the seed's field directory");
    let fields = prop::collection::vec(
        (any::<usize>(), any::<bool>(), any::<u64>(), any::<u64>()),
        1..4,
    );
    let bytes = prop::collection::vec((any::<usize>(), any::<u8>(), any::<u64>()), 0..3);
    runner()
        .run(&(fields, bytes), |(f, b)| {
            state_case(&mutate_state(&s.state, &f, &b), dir.path())
        })
        .unwrap();
}
