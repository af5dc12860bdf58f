//! `memlens report --html` in a real browser (headless Chromium, driven as a person would: typing,
//! clicking, dragging): the page works offline, its numbers are those `report --format json`
//! prints, and search, zoom (flame graph and timeline), sorting, the trees and callers/callees
//! work. Screenshots of each page are kept in the test's directory, and copied to the directory
//! `MEMLENS_SHOTS` names when set (how docs/report-ui.md's were made).
use crate::browser::{chromium_or_skip, Browser};
use crate::util::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The page of `profile` written by `memlens report --html`, and its path.
fn page(dir: &Path, profile: &Path) -> PathBuf {
    let html = dir.join("page.html");
    memlens()
        .arg("report")
        .arg(profile)
        .arg("--html")
        .arg(&html)
        .ok();
    html
}

fn keep_shot(b: &mut Browser, dir: &Path, name: &str) {
    let p = dir.join(name);
    b.eval("window.scrollTo(0, 0)");
    b.screenshot(&p);
    if let Some(d) = std::env::var_os("MEMLENS_SHOTS") {
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(&p, Path::new(&d).join(name)).unwrap();
    }
}

/// The script that finds a flame graph frame named `name` (a prefix) in the view's graph and
/// returns its centre in page coordinates.
fn frame_centre(view: &str, name: &str) -> String {
    format!(
        "(() => {{ const f = document.querySelector('iframe.flame[data-view={view}]'); \
         f.scrollIntoView({{block: 'start'}}); const d = f.contentDocument; \
         const g = [...d.querySelectorAll('#frames > g')].find(g => g.querySelector('title').textContent.startsWith({n})); \
         if (!g) return null; const r = g.querySelector('rect').getBoundingClientRect(), o = f.getBoundingClientRect(); \
         return [o.left + r.left + Math.min(r.width / 2, 40), o.top + r.top + r.height / 2]; }})()",
        n = json!(name)
    )
}

/// The text of column `col` of the table `table` now shown.
fn column(b: &mut Browser, table: &str, col: usize) -> Vec<String> {
    let v = b.eval(&format!(
        "[...document.querySelectorAll('table[data-table={table}] tbody tr')].map(r => r.children[{col}].textContent)"
    ));
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

/// `12.5 MiB` as bytes.
fn parse_bytes(s: &str) -> f64 {
    let (n, u) = s.trim().split_once(' ').unwrap();
    let k = match u {
        "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1048576.0,
        "GiB" => 1073741824.0,
        _ => panic!("unit {u}"),
    };
    n.parse::<f64>().unwrap() * k
}

#[test]
fn cxx_service_page_searches_zooms_and_sorts() {
    let Some(chrome) = chromium_or_skip("the report page in a browser") else {
        return;
    };
    let dir = test_dir();
    let d = dir.path();
    let prof = profile_of("cxx_service.cc", d, &["-pthread"], &["--interval", "64K"]);
    let html = page(d, &prof);
    let text = std::fs::read_to_string(&html).unwrap();
    for absent in ["<link", "src=\"http", "@import", "url(http"] {
        assert!(!text.contains(absent), "the page loads {absent}…");
    }
    let url = format!("file://{}", html.display());
    let mut b = Browser::open(&chrome, &url, 1280, 1400);
    b.wait_until(
        "document.querySelector('iframe.flame[data-view=peak]')?.dataset.ready",
        30,
    );
    keep_shot(&mut b, d, "cxx_service.png");

    // The numbers are those of `report --format json`, view by view.
    for view in ["peak", "temporaries", "alloc"] {
        let j = if view == "alloc" {
            report_json(&prof, &[])
        } else {
            report_json(&prof, &["--view", view])
        };
        let nums = |v: &Value| -> Vec<f64> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        };
        let all: Vec<Value> = j["stacks"]
            .as_array()
            .unwrap()
            .iter()
            .take(2000)
            .map(|s| s["value"].clone())
            .collect();
        let got = b.eval(&format!(
            "JSON.parse(document.getElementById('data').textContent).views.{view}.stacks.map(s => s.value)"
        ));
        assert_eq!(nums(&got), nums(&Value::Array(all)), "{view}");
    }
    // The first screen names the top peak site, the program's own function.
    let card = b.eval("document.querySelector('.card[data-view=peak]').textContent");
    assert!(
        card.as_str().unwrap().contains("service::build_batch"),
        "{card}"
    );

    // Search: typed into the box, it highlights in the flame graph and filters the table.
    b.click_on("#q");
    b.type_text("build_batch");
    b.wait_until(
        "document.getElementById('qinfo').textContent.includes('match')",
        10,
    );
    let fg = "document.querySelector('iframe.flame[data-view=peak]').contentDocument";
    let hl = b.eval(&format!(
        "[...{fg}.querySelectorAll('#frames rect')].filter(r => r.getAttribute('fill') === 'rgb(230,0,230)').map(r => r.parentNode.querySelector('title').textContent)"
    ));
    let hl = hl.as_array().unwrap();
    assert!(!hl.is_empty(), "nothing highlighted");
    assert!(
        hl.iter()
            .all(|t| t.as_str().unwrap().contains("build_batch")),
        "{hl:?}"
    );
    let matched = b.eval(&format!("{fg}.getElementById('matched').textContent"));
    assert!(
        matched.as_str().unwrap().starts_with("Matched:"),
        "{matched}"
    );
    let rows = b.eval("[...document.querySelectorAll('table[data-table=stacks] tbody tr')].map(r => !!r.querySelector('.fr.hit'))");
    let rows = rows.as_array().unwrap();
    assert!(
        !rows.is_empty() && rows.iter().all(|x| x == &json!(true)),
        "{rows:?}"
    );
    keep_shot(&mut b, d, "cxx_service-search.png");
    b.eval("(() => { const q = document.getElementById('q'); q.value = ''; q.dispatchEvent(new Event('input')); })()");
    b.wait_until(
        &format!("!{fg}.querySelector('#frames rect[fill=\"rgb(230,0,230)\"]')"),
        10,
    );

    // Zoom: a click on service::worker widens it to the graph's width and hides what is beside it.
    let at = b.eval(&frame_centre("peak", "service::worker"));
    assert!(
        at.is_array(),
        "no service::worker frame in the peak flame graph"
    );
    b.click(at[0].as_f64().unwrap(), at[1].as_f64().unwrap());
    b.wait_until(
        &format!("!{fg}.getElementById('unzoom').classList.contains('hide')"),
        10,
    );
    let widths = b.eval(&format!(
        "(() => {{ const d = {fg}; const g = [...d.querySelectorAll('#frames > g')].find(g => g.querySelector('title').textContent.startsWith('service::worker')); \
         return [g.querySelector('rect').getBoundingClientRect().width, d.getElementById('frames').getBoundingClientRect().width, d.querySelectorAll('#frames > g.hide').length]; }})()"
    ));
    let (w, all, hidden) = (
        widths[0].as_f64().unwrap(),
        widths[1].as_f64().unwrap(),
        widths[2].as_u64().unwrap(),
    );
    assert!(w > 0.9 * all, "zoomed frame {w} of {all} px");
    assert!(hidden > 0, "nothing hidden by the zoom");
    keep_shot(&mut b, d, "cxx_service-zoomed.png");

    // Sort: the value column, ascending after a click, descending after another.
    b.click_on("table[data-table=stacks] th[data-col=value]");
    let up: Vec<f64> = column(&mut b, "stacks", 1)
        .iter()
        .map(|s| parse_bytes(s))
        .collect();
    assert!(
        up.len() > 2 && up.windows(2).all(|w| w[0] <= w[1]),
        "{up:?}"
    );
    b.click_on("table[data-table=stacks] th[data-col=value]");
    let down: Vec<f64> = column(&mut b, "stacks", 1)
        .iter()
        .map(|s| parse_bytes(s))
        .collect();
    assert!(down.windows(2).all(|w| w[0] >= w[1]), "{down:?}");

    // Functions by name; then callers and callees of service::build_batch.
    b.click_on(".mode[data-view=peak][data-mode=functions]");
    b.click_on("table[data-table=functions] th[data-col=name]");
    let names = column(&mut b, "functions", 4);
    let mut sorted = names.clone();
    sorted.sort_by_key(|a| a.to_lowercase());
    assert!(names.len() > 3, "{names:?}");
    assert_eq!(
        names.first().map(|s| s.to_lowercase()),
        sorted.first().map(|s| s.to_lowercase()),
        "{names:?}"
    );
    b.eval("[...document.querySelectorAll('table[data-table=functions] a')].find(a => a.textContent.startsWith('service::build_batch')).click()");
    let callers = column(&mut b, "callers", 2);
    assert!(
        callers.iter().any(|c| c.starts_with("service::worker")),
        "{callers:?}"
    );
    let callees = column(&mut b, "callees", 2);
    assert!(!callees.is_empty(), "no callees");

    // The trees: top-down from the thread's start to build_batch; bottom-up from the allocator.
    b.click_on(".mode[data-view=peak][data-mode=topdown]");
    let td = column(&mut b, "topdown", 0);
    assert!(
        td.iter().any(|r| r.contains("service::build_batch")),
        "{td:?}"
    );
    b.click_on(".mode[data-view=peak][data-mode=bottomup]");
    let bu = column(&mut b, "bottomup", 0);
    assert!(
        !bu.is_empty() && !bu[0].contains("service::worker"),
        "{bu:?}"
    );

    // The timeline zooms to what is dragged across.
    let span = "(() => { const s = document.getElementById('tl'); return [+s.dataset.from, +s.dataset.to]; })()";
    let before = b.eval(span);
    let r = b.eval("(() => { const s = document.getElementById('tl'); s.scrollIntoView({block: 'center'}); const r = s.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()");
    let (x, y, w, h) = (
        r[0].as_f64().unwrap(),
        r[1].as_f64().unwrap(),
        r[2].as_f64().unwrap(),
        r[3].as_f64().unwrap(),
    );
    b.drag((x + 0.4 * w, y + 0.5 * h), (x + 0.6 * w, y + 0.5 * h));
    let after = b.eval(span);
    let len = |v: &Value| v[1].as_f64().unwrap() - v[0].as_f64().unwrap();
    assert!(len(&after) < 0.5 * len(&before), "{before} → {after}");

    // Offline: the page asked the network for nothing.
    let remote: Vec<&String> = b
        .requests
        .iter()
        .filter(|u| !(u.starts_with("file:") || u.starts_with("about:") || u.starts_with("data:")))
        .collect();
    assert!(remote.is_empty(), "requests: {remote:?}");
}

#[test]
fn redis_page_names_the_server_and_stacks_its_sites_over_time() {
    let dir = test_dir();
    let d = dir.path();
    let port = free_port().to_string();
    let prof = d.join("redis.pb.gz");
    let server = memlens()
        .args(["run", "--dump-every", "1s", "-o"])
        .arg(&prof)
        .args([
            "--",
            "redis-server",
            "--port",
            &port,
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .current_dir(d)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ping = || {
        Command::new("redis-cli")
            .args(["-p", &port, "ping"])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("PONG"))
    };
    wait_for("redis-server answering", 30, ping);
    Command::new("redis-benchmark")
        .args([
            "-p",
            &port,
            "-n",
            "20000",
            "-q",
            "-t",
            "set,get,lpush,lrange_100",
        ])
        .output()
        .unwrap();
    let dumps = || {
        std::fs::read_dir(d)
            .unwrap()
            .filter(|e| {
                let n = e.as_ref().unwrap().file_name().into_string().unwrap();
                n.starts_with("redis.")
                    && n.ends_with(".pb.gz")
                    && !n.contains("peak")
                    && n != "redis.pb.gz"
            })
            .count()
    };
    // a dump a second while it serves: the benchmark may end within the first second
    wait_for("two periodic dumps", 60, || dumps() >= 2);
    Command::new("redis-cli")
        .args(["-p", &port, "shutdown", "nosave"])
        .output()
        .unwrap();
    let o = wait_deadline(server, 60, "memlens run redis-server");
    assert_ok(&"memlens run redis-server", &o);
    let dumps = dumps();
    assert!(dumps >= 2, "periodic dumps: {dumps}");
    // named as started, not after the file its symlink points to (redis-check-rdb on Debian)
    let text = memlens().arg("report").arg(&prof).ok_stdout();
    let program = text
        .lines()
        .find(|l| l.starts_with("program: "))
        .unwrap_or("");
    assert!(program.starts_with("program: redis-server"), "{text}");
    let html = page(d, &prof);
    let Some(chrome) = chromium_or_skip("the report page in a browser") else {
        return;
    };
    let mut b = Browser::open(&chrome, &format!("file://{}", html.display()), 1280, 1400);
    b.wait_until("document.querySelector('iframe.flame')?.dataset.ready", 30);
    keep_shot(&mut b, d, "redis-server.png");
    let h1 = b.eval("document.querySelector('h1').textContent");
    assert!(h1.as_str().unwrap().contains("redis-server"), "{h1}");
    // the sites as bands between the dumps, each a polygon over every moment measured
    let bands = b.eval("document.querySelectorAll('#tl polygon.band').length");
    assert!(bands.as_u64().unwrap() >= 1, "no bands");
    let moments =
        b.eval("JSON.parse(document.getElementById('data').textContent).sites.times_s.length");
    assert!(
        moments.as_u64().unwrap() as usize > dumps,
        "{moments} moments, {dumps} dumps"
    );
}
