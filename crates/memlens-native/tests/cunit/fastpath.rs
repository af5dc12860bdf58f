//! The fast paths' promise, checked in the built library's machine code instead of timed: the
//! unsampled path of `malloc` is a subtract on %fs-relative memory (the thread's countdown), a
//! conditional branch and a tail jump through a global (the next allocator's table), nothing else —
//! no call, no locked instruction, no other store; `free` is one range compare and a branch before
//! its tail jump. `calloc`, `realloc` and `operator new`/`delete` are held to their own shapes.
//!
//! `objdump` (binutils) disassembles the `libmemlens.so` this build embeds; each function's hot
//! path is the shortest path from its entry to the jump (or, for a throwing `new`, the call)
//! through the forward table, following branches both ways. A failure names the function, the
//! instruction that broke the shape and why, and prints the path.
use std::collections::HashMap;
use std::process::Command;

/// One instruction as objdump prints it.
#[derive(Clone, Debug)]
struct Insn {
    addr: u64,
    mnemonic: String,
    operands: String,
    /// The address objdump resolved (`# 1d380 <ml_next>`, or a branch target), and its symbol.
    target: Option<u64>,
    symbol: String,
}

impl std::fmt::Display for Insn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:x}: {} {}", self.addr, self.mnemonic, self.operands)?;
        if !self.symbol.is_empty() && !self.operands.contains('<') {
            write!(f, " <{}>", self.symbol)?;
        }
        Ok(())
    }
}

impl Insn {
    fn is_cond_branch(&self) -> bool {
        self.mnemonic.starts_with('j') && self.mnemonic != "jmp"
    }
    fn indirect(&self) -> bool {
        self.operands.starts_with('*')
    }
    /// AT&T: the destination is the last operand; does it name memory?
    fn writes_memory(&self) -> bool {
        let dest = self.operands.rsplit(',').next().unwrap_or("");
        let reads_only = ["cmp", "test", "jmp", "call", "push", "nop", "prefetch"];
        dest.contains('(') && !reads_only.iter().any(|m| self.mnemonic.starts_with(m))
    }
    fn touches_fs(&self) -> bool {
        self.operands.contains("%fs:")
    }
}

/// Every function of the library: name -> its instructions.
fn disassemble(lib: &std::path::Path) -> HashMap<String, Vec<Insn>> {
    let out = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn", "-M", "att", "-j", ".text"])
        .arg(lib)
        .output()
        .expect("objdump (binutils, scripts/install-deps.sh) must be installed");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut funcs: HashMap<String, Vec<Insn>> = HashMap::new();
    let mut cur: Option<String> = None;
    for line in text.lines() {
        if let Some(name) = line
            .strip_suffix(">:")
            .and_then(|l| l.split_once(" <"))
            .map(|(_, n)| n)
        {
            cur = Some(name.to_string());
            funcs.entry(name.to_string()).or_default();
            continue;
        }
        let (Some(f), Some((addr, rest))) = (&cur, line.trim_start().split_once(":\t")) else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(addr.trim(), 16) else {
            continue;
        };
        let (code, comment) = rest.split_once('#').unwrap_or((rest, ""));
        let mut parts = code.trim().splitn(2, char::is_whitespace);
        let mut mnemonic = parts.next().unwrap_or("").to_string();
        let mut operands = parts.next().unwrap_or("").trim().to_string();
        for prefix in [
            "lock", "rep", "repz", "repnz", "bnd", "notrack", "cs", "ds", "data16",
        ] {
            if mnemonic == prefix {
                // keep a lock prefix visible; others are irrelevant to the shape
                let mut p = operands.splitn(2, char::is_whitespace);
                let m = p.next().unwrap_or("").to_string();
                operands = p.next().unwrap_or("").trim().to_string();
                mnemonic = if prefix == "lock" {
                    format!("lock {m}")
                } else {
                    m
                };
            }
        }
        // a resolved address: the comment's (rip-relative data), else a branch's "addr <sym>"
        let resolved = if comment.is_empty() {
            operands.as_str()
        } else {
            comment.trim()
        };
        let (target, symbol) = match resolved.split_once(" <") {
            Some((a, s)) => (
                u64::from_str_radix(a.trim().trim_start_matches('*'), 16).ok(),
                s.trim_end_matches('>').to_string(),
            ),
            None => (None, String::new()),
        };
        funcs.get_mut(f).unwrap().push(Insn {
            addr,
            mnemonic,
            operands,
            target,
            symbol,
        });
    }
    funcs
}

/// The library's data sections (.data*, .bss): where the forward tables live; not the GOT, which
/// would mean a load of the table's address first.
fn data_sections(lib: &std::path::Path) -> Vec<(String, u64, u64)> {
    let out = Command::new("objdump").arg("-h").arg(lib).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let name = *w.get(1)?;
            if !(name.starts_with(".data") || name.starts_with(".bss")) {
                return None;
            }
            let size = u64::from_str_radix(w.get(2)?, 16).ok()?;
            let vma = u64::from_str_radix(w.get(3)?, 16).ok()?;
            Some((name.to_string(), vma, vma + size))
        })
        .collect()
}

/// How a fast path ends: a tail jump through the table, or a call through it then a return (a
/// throwing `new` must see a NULL to throw).
#[derive(Clone, Copy, PartialEq)]
enum Forward {
    TailJump,
    CallThenReturn,
}

/// What the unsampled path of one function may hold.
struct Shape {
    what: &'static str,
    /// Updates of the countdown on %fs-relative memory; `rmw`: as one read-modify-write `sub`.
    countdown: usize,
    rmw: bool,
    /// Compares against a global (the sampled range's bounds).
    range_compares: usize,
    branches: usize,
    forward: Forward,
    /// pushes, pops and stack adjustments (a call needs an aligned stack and saved registers)
    stack: bool,
    max_insns: usize,
}

const MALLOC: Shape = Shape {
    what: "a subtract on the %fs countdown, a branch, a tail jump through the forward table",
    countdown: 1,
    rmw: true,
    range_compares: 0,
    branches: 1,
    forward: Forward::TailJump,
    stack: false,
    max_insns: 8,
};
const NEW_NOTHROW: Shape = Shape {
    what: "size 0 taken as 1, a subtract on the %fs countdown, a branch, a tail jump through the forward table",
    max_insns: 10,
    ..MALLOC
};
const CALLOC: Shape = Shape {
    what: "the n*s overflow check, a subtract on the %fs countdown, a branch, a tail jump",
    countdown: 1,
    rmw: true,
    range_compares: 0,
    branches: 2,
    forward: Forward::TailJump,
    stack: true,
    max_insns: 12,
};
const FREE: Shape = Shape {
    what: "one range compare, a branch, a tail jump through the forward table",
    countdown: 0,
    rmw: false,
    range_compares: 1,
    branches: 1,
    forward: Forward::TailJump,
    stack: false,
    max_insns: 6,
};
const REALLOC: Shape = Shape {
    what: "one range compare, the %fs countdown, two branches, a tail jump",
    countdown: 1,
    rmw: false,
    range_compares: 1,
    branches: 2,
    forward: Forward::TailJump,
    stack: false,
    max_insns: 14,
};
const NEW: Shape = Shape {
    what: "a subtract on the %fs countdown, a branch, a call through the forward table, a NULL test, return",
    countdown: 1,
    rmw: true,
    range_compares: 0,
    branches: 2,
    forward: Forward::CallThenReturn,
    stack: true,
    max_insns: 16,
};

/// The shortest path from the entry that reaches the forward (through `data`), branches followed
/// both ways; None if there is none.
fn hot_path(f: &[Insn], is_forward: &dyn Fn(&Insn) -> bool, how: Forward) -> Option<Vec<Insn>> {
    let at: HashMap<u64, usize> = f.iter().enumerate().map(|(i, x)| (x.addr, i)).collect();
    let mut best: Option<Vec<Insn>> = None;
    // depth-first over (index, path so far, forward call seen)
    let mut todo: Vec<(usize, Vec<Insn>, bool)> = vec![(0, Vec::new(), false)];
    while let Some((i, mut path, called)) = todo.pop() {
        let Some(x) = f.get(i) else { continue };
        if path.len() > 40 || path.iter().any(|p| p.addr == x.addr) {
            continue;
        }
        path.push(x.clone());
        let inside = |t: Option<u64>| t.and_then(|t| at.get(&t).copied());
        let done = match x.mnemonic.as_str() {
            "jmp" if x.indirect() => how == Forward::TailJump && is_forward(x),
            "ret" => called,
            _ => false,
        };
        if done {
            if best.as_ref().is_none_or(|b| path.len() < b.len()) {
                best = Some(path);
            }
            continue;
        }
        match x.mnemonic.as_str() {
            "jmp" | "ret" => {
                if let Some(t) = (!x.indirect()).then(|| inside(x.target)).flatten() {
                    todo.push((t, path, called));
                }
            }
            m if x.is_cond_branch() && !m.is_empty() => {
                if let Some(t) = inside(x.target) {
                    todo.push((t, path.clone(), called));
                }
                todo.push((i + 1, path, called));
            }
            "call" => {
                let fwd = how == Forward::CallThenReturn && x.indirect() && is_forward(x);
                todo.push((i + 1, path, called || fwd));
            }
            _ => todo.push((i + 1, path, called)),
        }
    }
    best
}

/// Why the path breaks `shape`, naming the instruction; None if it holds.
fn broken(path: &[Insn], shape: &Shape, is_forward: &dyn Fn(&Insn) -> bool) -> Option<String> {
    let (mut countdown, mut compares, mut branches) = (0, 0, 0);
    for x in path {
        let why = |w: &str| Some(format!("`{x}` {w}"));
        let m = x.mnemonic.as_str();
        if m.starts_with("lock")
            || m.starts_with("xchg")
            || m.starts_with("cmpxchg")
            || m.starts_with("xadd")
        {
            return why("is a locked (atomic) instruction");
        }
        if m == "call"
            && !(shape.forward == Forward::CallThenReturn && x.indirect() && is_forward(x))
        {
            return why("is a call");
        }
        if !shape.stack
            && (m.starts_with("push") || m.starts_with("pop") || x.operands.ends_with(",%rsp"))
        {
            return why("touches the stack (a frame on the fast path)");
        }
        if x.touches_fs() && x.writes_memory() {
            countdown += 1;
            if shape.rmw && !m.starts_with("sub") {
                return why("updates the countdown without one read-modify-write subtract");
            }
        } else if x.writes_memory() && !(shape.stack && m.starts_with("push")) {
            return why("stores to memory other than the countdown");
        }
        if m.starts_with("cmp") && x.operands.contains("(%rip)") {
            compares += 1;
        }
        if x.is_cond_branch() {
            branches += 1;
        }
    }
    let count = |what: &str, have: usize, want: usize| {
        (have != want).then(|| format!("{have} {what} where the shape has {want}"))
    };
    count("countdown updates", countdown, shape.countdown)
        .or_else(|| {
            count(
                "range compares against a global",
                compares,
                shape.range_compares,
            )
        })
        .or_else(|| count("conditional branches", branches, shape.branches))
        .or_else(|| {
            (path.len() > shape.max_insns)
                .then(|| format!("{} instructions, more than {}", path.len(), shape.max_insns))
        })
}

#[test]
fn fast_paths_keep_their_shape() {
    let lib = memlens_native::runtime().unwrap();
    let funcs = disassemble(&lib);
    let data = data_sections(&lib);
    assert!(!data.is_empty(), "no .data/.bss in {}", lib.display());
    let is_forward = |x: &Insn| {
        x.indirect()
            && x.operands.contains("(%rip)")
            && x.target
                .is_some_and(|t| data.iter().any(|(_, lo, hi)| (*lo..*hi).contains(&t)))
    };
    let mut checked = Vec::new();
    let mut failures = Vec::new();
    let shapes: &[(&str, &Shape)] = &[
        ("malloc", &MALLOC),
        ("calloc", &CALLOC),
        ("realloc", &REALLOC),
        ("free", &FREE),
        ("_Znwm", &NEW),
        ("_Znam", &NEW),
        ("_ZnwmRKSt9nothrow_t", &NEW_NOTHROW),
        ("_ZnamRKSt9nothrow_t", &NEW_NOTHROW),
        ("_ZdlPv", &FREE),
        ("_ZdaPv", &FREE),
        ("_ZdlPvm", &FREE),
        ("_ZdaPvm", &FREE),
        ("_ZdlPvRKSt9nothrow_t", &FREE),
        ("_ZdaPvRKSt9nothrow_t", &FREE),
        ("_ZdlPvSt11align_val_t", &FREE),
        ("_ZdaPvSt11align_val_t", &FREE),
        ("_ZdlPvmSt11align_val_t", &FREE),
        ("_ZdaPvmSt11align_val_t", &FREE),
    ];
    for (name, shape) in shapes {
        let f = funcs
            .get(*name)
            .unwrap_or_else(|| panic!("{name} is not in {}", lib.display()));
        let listing = |p: &[Insn]| p.iter().map(|x| format!("    {x}\n")).collect::<String>();
        let Some(path) = hot_path(f, &is_forward, shape.forward) else {
            failures.push(format!(
                "{name}: no path from its entry reaches the forward table (a jump or call through \
                 .data/.bss); its code:\n{}",
                listing(f)
            ));
            continue;
        };
        match broken(&path, shape, &is_forward) {
            Some(why) => failures.push(format!(
                "{name}: its unsampled path should be {}; {why}. The path:\n{}",
                shape.what,
                listing(&path)
            )),
            None => checked.push(format!("{name} ({} instructions)", path.len())),
        }
    }
    println!("fast paths in shape: {}", checked.join(", "));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The checker itself catches what it is for: shapes broken on purpose are refused with the
/// instruction named.
#[test]
fn the_checker_names_what_breaks_a_shape() {
    let insn = |addr: u64, m: &str, ops: &str, target: Option<u64>, sym: &str| Insn {
        addr,
        mnemonic: m.into(),
        operands: ops.into(),
        target,
        symbol: sym.into(),
    };
    let fwd = |x: &Insn| x.symbol == "ml_next";
    let good = vec![
        insn(0, "mov", "0x10(%rip),%rax", Some(0x100), "_DYNAMIC"),
        insn(7, "sub", "%rdi,%fs:(%rax)", None, ""),
        insn(11, "jle", "20 <malloc+0x20>", Some(0x20), "malloc+0x20"),
        insn(13, "jmp", "*0x20(%rip)", Some(0x200), "ml_next"),
        insn(0x20, "jmp", "3000 <slow>", Some(0x3000), "slow"),
    ];
    let p = hot_path(&good, &fwd, Forward::TailJump).unwrap();
    assert_eq!(p.len(), 4);
    assert_eq!(broken(&p, &MALLOC, &fwd), None);
    // why a variant of that malloc breaks the shape
    let why = |f: Vec<Insn>| {
        broken(
            &hot_path(&f, &fwd, Forward::TailJump).unwrap(),
            &MALLOC,
            &fwd,
        )
        .unwrap()
    };
    let mut locked = good.clone();
    locked[1].mnemonic = "lock sub".into();
    let e = why(locked);
    assert!(e.contains("lock sub") && e.contains("locked"), "{e}");
    let mut called = good.clone();
    called.insert(
        1,
        insn(3, "call", "4000 <ml_cost>", Some(0x4000), "ml_cost"),
    );
    let e = why(called);
    assert!(e.contains("ml_cost") && e.contains("a call"), "{e}");
    let mut split = good.clone();
    split[1] = insn(7, "mov", "%fs:(%rax),%rdx", None, "");
    split.insert(2, insn(8, "sub", "%rdi,%rdx", None, ""));
    split.insert(3, insn(9, "mov", "%rdx,%fs:(%rax)", None, ""));
    let e = why(split);
    assert!(e.contains("read-modify-write"), "{e}");
    let mut stored = good.clone();
    stored.insert(1, insn(3, "mov", "%rdi,0x8(%rip)", Some(0x300), "ml_last"));
    let e = why(stored);
    assert!(e.contains("ml_last") && e.contains("stores"), "{e}");
    // a free that counted down as malloc does
    let e = broken(&p, &FREE, &fwd).unwrap();
    assert!(
        e.contains("1 countdown updates where the shape has 0"),
        "{e}"
    );
}
