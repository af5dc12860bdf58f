//! `memlens report` output formats on the fixture profile: table, JSON shape, folded, flamegraph.
mod common;
use memlens_profile::{render_report, ReportFormat};
use memlens_profile::{ReportArgs, SampleIndex};

fn args(file: &std::path::Path, format: ReportFormat) -> ReportArgs {
    ReportArgs {
        file: file.to_path_buf(),
        sample_index: SampleIndex::AllocSpace,
        top: 10,
        format,
        flamegraph: None,
        view: None,
        html: None,
    }
}

#[test]
fn table_json_folded_and_flamegraph() {
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("d.raw");
    std::fs::write(&raw, common::build_and_dump(dir.path())).unwrap();
    let out = dir.path().join("d.pb.gz");
    memlens_profile::convert_raw(&raw, &out).unwrap();
    let p = memlens_profile::load(&out).unwrap();

    let t = render_report(&p, &args(&out, ReportFormat::Table)).unwrap();
    for want in [
        "top functions by alloc_space",
        "ns::Widget::make",
        "40.0%",
        "lib_site",
        "(inline) inl_helper",
    ] {
        assert!(t.contains(want), "{want} missing in:\n{t}");
    }

    let j: serde_json::Value =
        serde_json::from_str(&render_report(&p, &args(&out, ReportFormat::Json)).unwrap()).unwrap();
    assert_eq!(j["sample_index"], "alloc_space");
    assert_eq!(j["totals"]["alloc_space"], 10000.0);
    assert_eq!(j["totals"]["inuse_space"], 5000.0);
    let f0 = &j["functions"][0];
    assert_eq!(f0["function"], "ns::Widget::make(void (*)(int), int)");
    assert_eq!(f0["flat"], 4000.0);
    assert_eq!(f0["flat_share"], 0.4);
    let main = j["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == "main")
        .unwrap();
    assert_eq!(main["cum"], 10000.0);
    assert_eq!(main["flat"], 0.0);
    let s0 = &j["stacks"][0];
    assert_eq!(s0["value"], 4000.0);
    assert_eq!(s0["samples"], 4);
    assert_eq!(s0["values"]["inuse_space"], 2000.0);
    assert_eq!(
        s0["frames"][0]["function"],
        "ns::Widget::make(void (*)(int), int)"
    );
    assert_eq!(
        s0["frames"][0]["line"],
        common::line_of("cxxsite.cc", "SITE Widget::make")
    );
    assert_eq!(j["meta"]["interval"], 524288);

    let f = render_report(&p, &args(&out, ReportFormat::Folded)).unwrap();
    assert!(
        f.lines()
            .any(|l| l.ends_with(";main;inline_outer;inl_helper 2000") && l.starts_with("_start;")),
        "{f}"
    );

    let mut a = args(&out, ReportFormat::Table);
    a.sample_index = SampleIndex::InuseObjects;
    a.flamegraph = Some(dir.path().join("fg.svg"));
    let t = render_report(&p, &a).unwrap();
    assert!(t.contains("top functions by inuse_objects"));
    let svg = std::fs::read_to_string(dir.path().join("fg.svg")).unwrap();
    assert!(svg.starts_with("<?xml") && svg.contains("lib_site") && svg.contains("inuse_objects"));
}
