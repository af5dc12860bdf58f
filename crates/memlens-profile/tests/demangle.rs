//! C++ names as `c++filt` writes them, over thousands of real symbols: every `_Z` symbol that
//! libstdc++ (and boost's libraries, when installed) define, and this machine's C++ programs'
//! dynamic symbols. cpp_demangle 0.5.1 dropped the first parameter of templated constructors
//! (`basic_string(char, …)` for `basic_string(unsigned long, char, …)`, issue 34) and disagreed on
//! 767 of 6849 names; the C++ runtime's demangler agrees on all, up to the standard abbreviations
//! (`std::ostream` for `std::basic_ostream<char, std::char_traits<char> >`).
use std::io::Write;
use std::process::{Command, Stdio};

/// The `_Z` symbols a library or program defines or uses (`nm -D`), deduplicated.
fn symbols(path: &str) -> Vec<String> {
    let Ok(o) = Command::new("nm").args(["-D", path]).output() else {
        return vec![];
    };
    let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|s| s.starts_with("_Z"))
        .map(|s| s.split('@').next().unwrap().to_string())
        .collect();
    v.sort();
    v.dedup();
    v
}

/// `c++filt`'s name for each symbol, in order (one per line in, one per line out).
fn cxxfilt(syms: &[String]) -> Vec<String> {
    let mut c = Command::new("c++filt")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("c++filt (binutils) runs");
    let mut input = c.stdin.take().unwrap();
    let text = syms.join("\n") + "\n";
    let writer = std::thread::spawn(move || input.write_all(text.as_bytes()));
    let out = c.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect()
}

/// The standard abbreviations (Itanium `Ss`, `Si`, `So`, `Sd`) in their short form: c++filt writes
/// them out (`DMGL_VERBOSE`), the C++ runtime's demangler does not; both name the same type.
fn abbreviated(name: &str) -> String {
    let ct = "<char, std::char_traits<char> >";
    name.replace(
        "std::basic_string<char, std::char_traits<char>, std::allocator<char> >",
        "std::string",
    )
    .replace(&format!("std::basic_istream{ct}"), "std::istream")
    .replace(&format!("std::basic_ostream{ct}"), "std::ostream")
    .replace(&format!("std::basic_iostream{ct}"), "std::iostream")
    .replace(" >", ">") // "std::hash<std::string >" after the above: c++filt spaced a "> >"
}

#[test]
fn cpp_names_agree_with_cxxfilt() {
    let lib = "/usr/lib/x86_64-linux-gnu";
    let mut files = vec![format!("{lib}/libstdc++.so.6")];
    for e in std::fs::read_dir(lib).unwrap().flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with("libboost_") && n.contains(".so.") {
            files.push(format!("{lib}/{n}"));
        }
    }
    for prog in [
        "/usr/bin/c++filt",
        "/usr/bin/ld.gold",
        "/usr/bin/gdb",
        "/usr/bin/cmake",
    ] {
        files.push(prog.into());
    }
    let mut syms: Vec<String> = files.iter().flat_map(|f| symbols(f)).collect();
    syms.sort();
    syms.dedup();
    assert!(
        syms.len() > 3000,
        "only {} C++ symbols found in {files:?}",
        syms.len()
    );
    let want = cxxfilt(&syms);
    assert_eq!(want.len(), syms.len());
    let bad: Vec<String> = syms
        .iter()
        .zip(&want)
        .filter(|(s, w)| abbreviated(&memlens_profile::demangle(s)) != abbreviated(w))
        .map(|(s, w)| {
            format!(
                "{s}\n  c++filt: {w}\n  memlens: {}",
                memlens_profile::demangle(s)
            )
        })
        .collect();
    assert!(
        bad.is_empty(),
        "{} of {} names differ from c++filt, e.g.:\n{}",
        bad.len(),
        syms.len(),
        bad.iter().take(8).cloned().collect::<Vec<_>>().join("\n")
    );
    // The constructor of issue 34 keeps its first parameter.
    let ctor = "_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEC1EmcRKS3_";
    assert!(
        memlens_profile::demangle(ctor).contains("basic_string(unsigned long, char,"),
        "{}",
        memlens_profile::demangle(ctor)
    );
}
