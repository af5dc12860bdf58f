//! Raw dump with real addresses → symbolized pprof: PIE, shared library, inlined frames, C++ names,
//! build-ID checks, and `go tool pprof` reading the result with no binaries at hand.
mod common;
use memlens_profile::SampleIndex;
use memlens_profile::{Frame, Profile};
use std::path::Path;
use std::process::Command;

fn convert(dir: &Path, raw: &str) -> (Profile, memlens_profile::ConvertSummary) {
    let rp = dir.join("dump.raw");
    std::fs::write(&rp, raw).unwrap();
    let out = dir.join("out.pb.gz");
    let sum = memlens_profile::convert_raw(&rp, &out).expect("convert_raw");
    let p = memlens_profile::load(&out).expect("read back");
    (p, sum)
}

/// Frames of the sample with `bytes` alloc bytes (each fixture site has a distinct size).
fn frames_of(p: &Profile, bytes: f64) -> Vec<Frame> {
    let s = p
        .samples
        .iter()
        .find(|s| s.alloc_bytes == bytes)
        .expect("sample");
    p.frames(s)
}

fn has(frames: &[Frame], name: &str) -> bool {
    frames.iter().any(|f| f.function == name)
}

#[test]
fn symbolizes_pie_inline_shared_library_and_cxx() {
    let dir = tempfile::tempdir().unwrap();
    let raw = common::build_and_dump(dir.path());
    let (p, sum) = convert(dir.path(), &raw);
    assert_eq!(sum.stacks, 4);
    assert_eq!(sum.unsymbolized_modules, 0, "{:?}", sum.warnings);
    assert_eq!(p.total(SampleIndex::AllocSpace), 10000.0);
    assert_eq!(p.total(SampleIndex::InuseSpace), 5000.0);
    assert_eq!(p.total(SampleIndex::AllocObjects), 10.0);

    let c = frames_of(&p, 1000.0);
    assert_eq!(c[0].function, "c_site", "{c:?}");
    assert!(c[0].file.ends_with("fakeprof.c"), "{c:?}");
    assert_eq!(c[0].line, common::line_of("fakeprof.c", "SITE c_site"));
    assert!(has(&c, "main"), "{c:?}");

    let i = frames_of(&p, 2000.0);
    assert_eq!(i[0].function, "inl_helper", "{i:?}");
    assert!(i[0].inlined);
    assert_eq!(i[0].line, common::line_of("fakeprof.c", "SITE inl_helper"));
    assert_eq!(i[1].function, "inline_outer", "{i:?}");
    assert_eq!(
        i[1].line,
        common::line_of("fakeprof.c", "SITE inline_outer")
    );

    let l = frames_of(&p, 3000.0);
    assert_eq!(l[0].function, "lib_site", "{l:?}");
    assert!(l[0].file.ends_with("libsite.c"));
    assert_eq!(l[0].line, common::line_of("libsite.c", "SITE lib_site"));
    assert_eq!(l[1].function, "main", "{l:?}");

    let x = frames_of(&p, 4000.0);
    assert_eq!(
        x[0].function, "ns::Widget::make(void (*)(int), int)",
        "{x:?}"
    );
    assert_eq!(
        x[0].line,
        common::line_of("cxxsite.cc", "SITE Widget::make")
    );
    assert!(has(&x, "cxx_site"), "{x:?}");

    // Mappings carry build IDs and say what was symbolized.
    let exe = p
        .mappings
        .iter()
        .find(|m| m.filename.ends_with("/fakeprof"))
        .expect("exe mapping");
    assert!(
        !exe.build_id.is_empty()
            && exe.has_functions
            && exe.has_line_numbers
            && exe.has_inline_frames
    );
}

#[test]
fn absent_binary_or_other_build_keeps_addresses_and_warns() {
    let dir = tempfile::tempdir().unwrap();
    let raw = common::build_and_dump(dir.path());
    // The library is gone (a profile from another machine) …
    std::fs::remove_file(dir.path().join("libsite.so")).unwrap();
    // … and the main program on disk is not the one profiled.
    let exe = dir.path().join("fakeprof").display().to_string();
    let bid = memlens_profile::file_build_id(&exe).unwrap().unwrap();
    let raw = raw.replace(&bid, &"ab".repeat(bid.len() / 2));
    let (p, sum) = convert(dir.path(), &raw);
    assert_eq!(sum.unsymbolized_modules, 2, "{:?}", sum.warnings);
    assert!(sum.warnings.iter().any(|w| w.contains("libsite.so")));
    assert!(sum.warnings.iter().any(|w| w.contains("build id")));
    let l = frames_of(&p, 3000.0);
    assert!(l[0].function.starts_with("libsite.so+0x"), "{l:?}");
    assert!(l[1].function.starts_with("fakeprof+0x"), "{l:?}");
    let m = p
        .mappings
        .iter()
        .find(|m| m.filename.ends_with("libsite.so"))
        .unwrap();
    assert!(!m.has_functions);
}

fn go_available() -> bool {
    Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn go_tool_pprof_reads_our_names_and_lines_without_binaries() {
    assert!(
        go_available(),
        "`go` is not installed: scripts/install-deps.sh installs golang-go, which provides `go tool pprof`"
    );
    let dir = tempfile::tempdir().unwrap();
    let raw = common::build_and_dump(dir.path());
    let rp = dir.path().join("dump.raw");
    std::fs::write(&rp, raw).unwrap();
    let alone = tempfile::tempdir().unwrap();
    let out = alone.path().join("p.pb.gz");
    memlens_profile::convert_raw(&rp, &out).unwrap();
    // Take the binaries away so pprof can only use what the file says.
    std::fs::remove_dir_all(dir.path()).unwrap();
    let top = common::go_pprof(
        &["-top", "-sample_index=alloc_space", "p.pb.gz"],
        alone.path(),
    );
    for f in ["c_site", "inl_helper", "lib_site", "ns::Widget::make"] {
        assert!(top.contains(f), "{f} missing in:\n{top}");
    }
    assert!(top.contains("Type: alloc_space"), "{top}");
    let lines = common::go_pprof(
        &["-top", "-lines", "-sample_index=alloc_space", "p.pb.gz"],
        alone.path(),
    );
    let want = format!(
        "fakeprof.c:{}",
        common::line_of("fakeprof.c", "SITE c_site")
    );
    assert!(lines.contains(&want), "{want} missing in:\n{lines}");
    let inuse = common::go_pprof(
        &["-top", "-sample_index=inuse_space", "p.pb.gz"],
        alone.path(),
    );
    assert!(
        inuse.contains("5000B") || inuse.contains("4.88kB"),
        "{inuse}"
    );
}

#[test]
fn separate_debug_files_are_found_by_debuglink_and_build_id() {
    let dir = tempfile::tempdir().unwrap();
    let raw = common::build_and_dump(dir.path());
    // Move the main program's DWARF into a .debug file next to it (debuglink), as distributions do.
    let exe = dir.path().join("fakeprof");
    let dbg = dir.path().join("fakeprof.debug");
    let run = |args: &[&std::ffi::OsStr]| {
        assert!(
            Command::new(args[0])
                .args(&args[1..])
                .current_dir(dir.path())
                .status()
                .unwrap()
                .success(),
            "{args:?}"
        );
    };
    run(&[
        "objcopy".as_ref(),
        "--only-keep-debug".as_ref(),
        exe.as_os_str(),
        dbg.as_os_str(),
    ]);
    run(&["strip".as_ref(), "-g".as_ref(), exe.as_os_str()]);
    run(&[
        "objcopy".as_ref(),
        "--add-gnu-debuglink=fakeprof.debug".as_ref(),
        exe.as_os_str(),
    ]);
    let (p, sum) = convert(dir.path(), &raw);
    assert_eq!(sum.unsymbolized_modules, 0, "{:?}", sum.warnings);
    let i = frames_of(&p, 2000.0);
    assert_eq!(
        i[0].function, "inl_helper",
        "inline frames need the DWARF from the .debug file: {i:?}"
    );
    assert_eq!(i[0].line, common::line_of("fakeprof.c", "SITE inl_helper"));
    // glibc's DWARF comes from /usr/lib/debug/.build-id (package libc6-dbg).
    let dbg_installed = Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "libc6-dbg"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"));
    assert!(
        dbg_installed,
        "libc6-dbg is not installed: scripts/install-deps.sh installs it"
    );
    let c = frames_of(&p, 1000.0);
    let libc = c
        .iter()
        .find(|f| f.function == "__libc_start_call_main")
        .expect("libc frame");
    assert!(
        libc.file.ends_with(".h") || libc.file.ends_with(".c"),
        "no file for libc: {libc:?}"
    );
    assert!(libc.line > 0, "{libc:?}");
}

/// Dumps of several processes of one program, symbolized together, compare stack by stack: by
/// function names, and by `module+0xOFFSET` where a module cannot be symbolized (its addresses
/// differ between the processes under ASLR, its names do not); each such module warns once.
#[test]
fn dumps_of_several_processes_symbolized_together_compare_by_names() {
    use memlens_profile::{parse_raw, symbolize_dumps, Frames, Stacks};
    let dir = tempfile::tempdir().unwrap();
    let first = common::build_and_dump(dir.path());
    let again = Command::new(dir.path().join("fakeprof")).output().unwrap();
    assert!(again.status.success());
    let dumps = [
        parse_raw(&first).unwrap(),
        parse_raw(&String::from_utf8(again.stdout).unwrap()).unwrap(),
    ];
    let keys = |p: &Profile| {
        let mut fr = Frames::default();
        let st = Stacks::new(p, &mut fr);
        let mut k: Vec<(Vec<String>, f64)> = st
            .list
            .iter()
            .map(|s| (st.key(s, &fr), s.get(SampleIndex::AllocSpace)))
            .collect();
        k.sort_by(|a, b| a.0.cmp(&b.0));
        k
    };
    let (ps, warnings) = symbolize_dumps(&dumps);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(ps.len(), 2);
    assert_eq!(keys(&ps[0]), keys(&ps[1]));
    assert!(keys(&ps[0]).iter().any(|(k, _)| k[0] == "lib_site"));

    std::fs::remove_file(dir.path().join("libsite.so")).unwrap();
    let (ps, warnings) = symbolize_dumps(&dumps);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("libsite.so"), "{warnings:?}");
    assert_eq!(keys(&ps[0]), keys(&ps[1]));
    let lib = keys(&ps[0]);
    let lib = lib.iter().find(|(_, b)| *b == 3000.0).unwrap();
    assert!(lib.0[0].starts_with("libsite.so+0x"), "{lib:?}");
}

/// One symbolizer looks each address of a build up once, whatever path the build is found at, and
/// reads a file again when it changed on disk (a rebuilt binary is not served from the cache).
#[test]
fn one_symbolizer_serves_a_build_once_and_rereads_a_changed_file() {
    use memlens_profile::{file_build_id, Symbolizer};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    common::build_and_dump(dir.path());
    let exe = dir.path().join("fakeprof");
    let exe_s = exe.display().to_string();
    let bid = file_build_id(&exe_s).unwrap().unwrap();
    let nm = Command::new("nm").arg(&exe).output().unwrap();
    let main = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find(|l| l.ends_with(" T main"))
        .and_then(|l| u64::from_str_radix(l.split(' ').next()?, 16).ok())
        .expect("main in nm's output");
    let sym = Symbolizer::new();
    let a = sym.module(&exe_s, &bid, &[main]).unwrap();
    assert_eq!(&*a[0][0].name, "main");
    let b = sym.clone().module(&exe_s, &bid, &[main, main]).unwrap();
    assert!(Arc::ptr_eq(&a[0], &b[0]) && Arc::ptr_eq(&a[0], &b[1]));
    // The same build at another path: from the cache.
    let copy = dir.path().join("copy");
    std::fs::copy(&exe, &copy).unwrap();
    let c = sym
        .module(&copy.display().to_string(), &bid, &[main])
        .unwrap();
    assert!(Arc::ptr_eq(&a[0], &c[0]));
    // Another file now at the path: its build ID is read again, and it is not the profiled one.
    std::fs::remove_file(&exe).unwrap();
    std::fs::copy(dir.path().join("libsite.so"), &exe).unwrap();
    let e = sym.module(&exe_s, &bid, &[main]).unwrap_err();
    assert!(e.contains("build id"), "{e}");
}
