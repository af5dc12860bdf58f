//! musl (issue 30 item 5): programs whose loader is musl's are profiled under `memlens run` by the
//! runtime built with musl-gcc, with function names and file:line; the bytes at a known site are
//! the program's own count within the sampling error. `LD_PRELOAD` names `<dir>/$LIB/libmemlens.so`,
//! which glibc's loader expands and musl's does not, so an exec chain across the two C libraries
//! is profiled in every process. A real program: Lua 5.4 from crates.io's lua-src crate, built
//! with musl-gcc at test time into a cache outside the clone.
use crate::util::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// 32 KiB: the 2000 blocks of 16 KiB are each sampled with probability 1 - e^-0.5 (~790 samples,
/// one sigma of the estimate ~2.8 %), so ±12 % is over four sigmas.
const INTERVAL: &str = "32K";
const TOLERANCE: f64 = 0.12;

/// Compile `srcs` with `cc` into `out`. musl-gcc's specs leave out `--eh-frame-hdr` (gcc passes it
/// on its own), and without the index no unwinder finds a program's frame tables: asked for here,
/// as a musl distribution's compiler does.
fn build(cc: &str, srcs: &[PathBuf], flags: &[&str], out: &Path) -> Option<()> {
    let mut c = Command::new(cc);
    c.args(["-O2", "-g", "-pthread", "-Wl,--eh-frame-hdr"])
        .args(flags)
        .args(srcs)
        .arg("-o")
        .arg(out)
        .arg("-lm");
    let o = c.output().ok()?;
    if !o.status.success() {
        panic!("{c:?} failed: {}", String::from_utf8_lossy(&o.stderr));
    }
    Some(())
}

/// `runtime/tests/musl_server.c` built by musl-gcc (and `gcc`: the chain's glibc program).
fn servers(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    let src = root().join("runtime/tests/musl_server.c");
    let (m, g) = (dir.join("server-musl"), dir.join("server-glibc"));
    if build("musl-gcc", std::slice::from_ref(&src), &[], &m).is_none() {
        eprintln!("SKIPPED: no musl-gcc (musl-tools, scripts/install-deps.sh)");
        return None;
    }
    build("gcc", &[src], &[], &g).expect("gcc");
    Some((m, g))
}

/// What a server printed: (C library, pid, site line, bytes it holds).
fn served(o: &Output) -> Vec<(String, i64, i64, f64)> {
    stdout(o)
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(w.len(), 9, "unexpected line '{l}'{}", printed(o));
            (
                w[0].to_string(),
                w[2].parse().unwrap(),
                w[6].parse().unwrap(),
                w[8].parse().unwrap(),
            )
        })
        .collect()
}

/// The profiles in `dir` (`p.pb.gz` and `p.<pid>.pb.gz`, no peak files), by the pid they record.
fn profiles(dir: &Path) -> Vec<(i64, Value)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with("p.") && n.ends_with(".pb.gz") && !n.contains("peak") {
            let j = report_json(&e.path(), &["--sample-index", "inuse_space"]);
            v.push((j["meta"]["pid"].as_i64().unwrap(), j));
        }
    }
    v
}

/// The stack of `j` whose innermost frame is `function`: its frames as (function, file, line),
/// and its in-use bytes.
fn stack_at(j: &Value, function: &str) -> (Vec<(String, String, i64)>, f64) {
    let s = j["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["frames"][0]["function"] == function)
        .unwrap_or_else(|| panic!("no stack at {function}: {j:#}"));
    let frames = s["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["function"].as_str().unwrap_or("").to_string(),
                f["file"].as_str().unwrap_or("").to_string(),
                f["line"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    (frames, s["value"].as_f64().unwrap())
}

/// A server's profile: `handle_request` at the line it printed, called from `main`, in its file,
/// holding its own count within the sampling error.
fn check_server(j: &Value, line: i64, bytes: f64, what: &str) {
    let (frames, held) = stack_at(j, "handle_request");
    assert!(
        frames[0].1.ends_with("musl_server.c") && frames[0].2 == line,
        "{what}: handle_request at musl_server.c:{line} expected: {frames:?}"
    );
    assert!(
        frames.get(1).is_some_and(|f| f.0 == "main"),
        "{what}: {frames:?}"
    );
    assert!(
        (held - bytes).abs() <= TOLERANCE * bytes,
        "{what}: {held} bytes in use at handle_request, the program holds {bytes}"
    );
}

#[test]
fn a_musl_server_is_profiled_with_names_and_lines() {
    let dir = test_dir();
    let Some((musl, _)) = servers(&dir) else {
        return;
    };
    // Why a runtime of its own: the glibc one, preloaded into musl's loader, stops the program.
    let raw = Command::new(&musl).env("LD_PRELOAD", runtime_lib()).out();
    assert_eq!(raw.status.code(), Some(127), "{}", printed(&raw));
    let o = memlens()
        .args(["run", "--interval", INTERVAL, "-o"])
        .arg(dir.join("p.pb.gz"))
        .arg("--")
        .arg(&musl)
        .out();
    assert!(o.status.success(), "{}", printed(&o));
    assert!(!stderr(&o).contains("unprofiled"), "{}", printed(&o));
    let s = served(&o);
    assert_eq!(s.len(), 1, "{}", printed(&o));
    let (libc, pid, line, bytes) = &s[0];
    assert_eq!(libc, "musl");
    let p = profiles(&dir);
    assert_eq!(p.len(), 1, "one profile expected{}", printed(&o));
    assert_eq!(p[0].0, *pid);
    check_server(&p[0].1, *line, *bytes, "musl server");
}

/// glibc's sh starts the glibc server, which runs the musl one, which runs the glibc one: every
/// server is profiled, under the runtime of its own C library.
#[test]
fn an_exec_chain_across_c_libraries_is_profiled_in_every_process() {
    let dir = test_dir();
    let Some((musl, glibc)) = servers(&dir) else {
        return;
    };
    let chain = format!("{} {} {}", glibc.display(), musl.display(), glibc.display());
    let o = memlens()
        .args(["run", "--interval", INTERVAL, "-o"])
        .arg(dir.join("p.pb.gz"))
        .args(["--", "sh", "-c", &chain])
        .out();
    assert!(o.status.success(), "{}", printed(&o));
    let s = served(&o);
    let libcs: Vec<&str> = s.iter().map(|x| x.0.as_str()).collect();
    assert_eq!(libcs, ["glibc", "musl", "glibc"], "{}", printed(&o));
    let p = profiles(&dir);
    for (libc, pid, line, bytes) in &s {
        let j = p
            .iter()
            .find(|(q, _)| q == pid)
            .map(|(_, j)| j)
            .unwrap_or_else(|| {
                panic!("no profile of the {libc} server (pid {pid}){}", printed(&o))
            });
        check_server(j, *line, *bytes, &format!("{libc} server, pid {pid}"));
    }
}

/// Lua 5.4's sources from crates.io's lua-src crate (cargo's own cache), or None (said).
fn lua_sources(dir: &Path) -> Option<PathBuf> {
    let proj = dir.join("lua-fetch");
    std::fs::create_dir_all(proj.join("src")).unwrap();
    std::fs::write(
        proj.join("Cargo.toml"),
        "[package]\nname = \"lua-fetch\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n\
         [dependencies]\nlua-src = \"=547.0.0\"\n",
    )
    .unwrap();
    std::fs::write(proj.join("src/main.rs"), "fn main() {}\n").unwrap();
    let meta = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--manifest-path"])
        .arg(proj.join("Cargo.toml"))
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success());
    let Some(meta) = meta else {
        eprintln!("SKIPPED: cannot fetch the lua-src crate from crates.io (cargo metadata failed)");
        return None;
    };
    let v: Value = serde_json::from_slice(&meta.stdout).unwrap();
    let manifest = v["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "lua-src")
        .and_then(|p| p["manifest_path"].as_str())
        .expect("lua-src in the metadata")
        .to_string();
    Some(Path::new(&manifest).parent().unwrap().join("lua-5.4.7"))
}

/// The Lua host built with musl-gcc, in `${XDG_CACHE_HOME:-~/.cache}/memlens-test-musl/<hash>`
/// (the hash of Lua's sources, the host's and the flags), built once.
fn lua_program(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    if !Command::new("musl-gcc")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        eprintln!("SKIPPED: no musl-gcc (musl-tools, scripts/install-deps.sh)");
        return None;
    }
    let lua = lua_sources(dir)?;
    let mut srcs: Vec<PathBuf> = std::fs::read_dir(&lua)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "c"))
        .collect();
    srcs.sort();
    srcs.push(root().join("runtime/tests/musl_lua.c"));
    let flags = ["-DLUA_USE_LINUX", "-I"];
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in srcs
        .iter()
        .flat_map(|s| std::fs::read(s).unwrap())
        .chain(flags.concat().bytes())
    {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache"));
    let cache = base.join("memlens-test-musl").join(format!("{h:016x}"));
    let exe = cache.join("lua-host");
    if !exe.exists() {
        eprintln!(
            "building Lua with musl-gcc into {} (cached)",
            cache.display()
        );
        std::fs::create_dir_all(&cache).unwrap();
        let tmp = cache.join(format!(".lua-host.{}", std::process::id()));
        let inc = lua.display().to_string();
        build("musl-gcc", &srcs, &[flags[0], flags[1], &inc], &tmp)?;
        std::fs::rename(&tmp, &exe).unwrap();
    }
    Some((exe, lua))
}

/// A real program built with musl-gcc: Lua's allocations are named in Lua's own sources (the
/// innermost frame is Lua's allocation entry in lmem.c, at a line that calls the allocator), the
/// host's main is below, and the bytes in use at exit are what Lua itself counted.
#[test]
fn lua_built_with_musl_is_profiled_with_names_and_lines() {
    let dir = test_dir();
    let Some((exe, lua)) = lua_program(&dir) else {
        return;
    };
    let o = memlens()
        .args(["run", "--interval", INTERVAL, "-o"])
        .arg(dir.join("p.pb.gz"))
        .arg("--")
        .arg(&exe)
        .out();
    assert!(o.status.success(), "{}", printed(&o));
    let counted: f64 = stdout(&o)
        .strip_prefix("lua holds ")
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no count printed{}", printed(&o)));
    let j = report_json(&dir.join("p.pb.gz"), &["--sample-index", "inuse_space"]);
    let held = j["totals"]["inuse_space"].as_f64().unwrap();
    assert!(
        (held - counted).abs() <= TOLERANCE * counted,
        "{held} bytes in use, Lua counted {counted}"
    );
    let lmem = std::fs::read_to_string(lua.join("lmem.c")).unwrap();
    let top = j["stacks"].as_array().unwrap()[0]["frames"]
        .as_array()
        .unwrap()
        .clone();
    let (f, file, line) = (
        top[0]["function"].as_str().unwrap_or(""),
        top[0]["file"].as_str().unwrap_or(""),
        top[0]["line"].as_i64().unwrap_or(0),
    );
    let text = lmem.lines().nth((line - 1).max(0) as usize).unwrap_or("");
    assert!(
        f.starts_with("luaM_")
            && file.ends_with("lmem.c")
            && (text.contains("firsttry") || text.contains("callfrealloc")),
        "innermost frame {f} {file}:{line} ('{text}'): {top:#?}"
    );
    assert!(
        top.iter().any(|fr| fr["function"] == "main"
            && fr["file"]
                .as_str()
                .is_some_and(|p| p.ends_with("musl_lua.c"))),
        "{top:#?}"
    );
}
