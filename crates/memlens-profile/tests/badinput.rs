//! Unreadable, empty, corrupt and truncated inputs: one error each, never a panic.
use std::path::Path;

fn err(path: &Path) -> String {
    format!("{:#}", memlens_profile::load(path).unwrap_err())
}

#[test]
fn bad_files_give_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    assert!(
        err(&p("absent.pb.gz")).contains("cannot read"),
        "{}",
        err(&p("absent.pb.gz"))
    );

    std::fs::write(p("empty"), b"").unwrap();
    assert!(err(&p("empty")).contains("empty"));

    std::fs::write(p("text"), b"hello world, not a profile\n").unwrap();
    assert!(
        err(&p("text")).contains("neither a memlens raw dump nor a pprof profile"),
        "{}",
        err(&p("text"))
    );

    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &[7u8; 10000]).unwrap();
    let gz = gz.finish().unwrap();
    std::fs::write(p("cut.pb.gz"), &gz[..gz.len() / 2]).unwrap();
    assert!(
        err(&p("cut.pb.gz")).contains("corrupt gzip"),
        "{}",
        err(&p("cut.pb.gz"))
    );

    std::fs::write(
        p("cut.raw"),
        "memlens-raw 1\npid 1\nexe /x\ninterval 0\nstack 1 65536 8 0 0 0 0x10\n",
    )
    .unwrap();
    assert!(
        err(&p("cut.raw")).contains("truncated raw dump"),
        "{}",
        err(&p("cut.raw"))
    );

    std::fs::write(
        p("bad.raw"),
        "memlens-raw 1\npid 1\nexe /x\ninterval 0\nstack 1 65536 8 0 0 0 zz\nend\n",
    )
    .unwrap();
    let e = err(&p("bad.raw"));
    assert!(e.contains("line 5") && e.contains("bad.raw"), "{e}");

    // A directory is not a file.
    assert!(err(dir.path()).contains("cannot read"));
}

#[test]
fn raw_dump_of_absent_binaries_loads_with_addresses() {
    let raw = "memlens-raw 1\npid 1\nexe /nonexistent/app\ninterval 524288\n\
module 0x400000 0123abcd loaded /nonexistent/app\nsegment 0x1000 0x1000 0x1000 r-x\n\
maps\nend maps\nstack 1 65536 600000 65536 600000 0 0x401234 0x401500\nend\n";
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("x.raw");
    std::fs::write(&f, raw).unwrap();
    let p = memlens_profile::load(&f).unwrap();
    let fr = p.frames(&p.samples[0]);
    assert_eq!(fr[0].function, "app+0x1233");
    assert_eq!(fr[1].function, "app+0x14ff");
}
