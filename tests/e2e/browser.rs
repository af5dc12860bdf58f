//! Headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: the
//! browser reads commands on its descriptor 3 and writes replies and events on 4, each a JSON text
//! ended by a NUL), so the tests click, type and read the page as a person would, with no
//! websocket client and no npm package.
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// The Chromium binary, if installed.
pub fn chromium() -> Option<PathBuf> {
    [
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        "/usr/bin/google-chrome",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

/// Chromium, or a test failure saying how to install it; `None` (after one `SKIPPED` line) only
/// when this system's package manager has no Chromium to install.
pub fn chromium_or_skip(what: &str) -> Option<PathBuf> {
    if let Some(c) = chromium() {
        return Some(c);
    }
    let policy = Command::new("apt-cache")
        .args(["policy", "chromium"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let candidate = policy
        .lines()
        .find_map(|l| l.trim().strip_prefix("Candidate:"))
        .map(str::trim);
    match candidate {
        Some(c) if c != "(none)" => {
            panic!("chromium is not installed (apt has {c}): run scripts/install-deps.sh")
        }
        _ => {
            println!("SKIPPED: {what}: no Chromium on this system and none its package manager can install");
            None
        }
    }
}

/// A headless browser with one page open.
pub struct Browser {
    child: Child,
    to: std::fs::File,
    from: Receiver<Value>,
    next: u64,
    session: String,
    /// Every network request the page made (URLs), for checking that a page stays offline.
    pub requests: Vec<String>,
    _profile: tempfile::TempDir,
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors we then own.
    assert_eq!(
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) },
        0,
        "pipe2"
    );
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

impl Browser {
    /// Start `chrome` headless with a `width`×`height` window, open `url` and wait for it to load.
    pub fn open(chrome: &Path, url: &str, width: u32, height: u32) -> Browser {
        use std::os::fd::AsRawFd;
        let profile = tempfile::tempdir().unwrap();
        let (cmd_r, cmd_w) = pipe();
        let (res_r, res_w) = pipe();
        let (a, b) = (cmd_r.as_raw_fd(), res_w.as_raw_fd());
        let mut c = Command::new(chrome);
        c.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--remote-debugging-pipe",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--window-size={width},{height}"))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: only fcntl and dup2 between fork and exec. Copied away first (the pipe may
        // already be 3 or 4, where dup2 would keep its O_CLOEXEC), then onto 3 and 4.
        unsafe {
            c.pre_exec(move || {
                let (a, b) = (
                    libc::fcntl(a, libc::F_DUPFD, 10),
                    libc::fcntl(b, libc::F_DUPFD, 10),
                );
                if a < 0 || b < 0 || libc::dup2(a, 3) < 0 || libc::dup2(b, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = c.spawn().expect("start chromium");
        drop((cmd_r, res_w));
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::fs::File::from(res_r);
        std::thread::spawn(move || {
            let mut r = BufReader::new(reader);
            let mut buf = Vec::new();
            while r.read_until(0, &mut buf).is_ok_and(|n| n > 0) {
                buf.pop_if(|b| *b == 0);
                if let Ok(v) = serde_json::from_slice::<Value>(&buf) {
                    if tx.send(v).is_err() {
                        break;
                    }
                }
                buf.clear();
            }
        });
        let mut br = Browser {
            child,
            to: std::fs::File::from(cmd_w),
            from: rx,
            next: 0,
            session: String::new(),
            requests: Vec::new(),
            _profile: profile,
        };
        let t = br.call("Target.createTarget", json!({ "url": "about:blank" }));
        let target = t["targetId"].as_str().unwrap().to_string();
        let s = br.call(
            "Target.attachToTarget",
            json!({ "targetId": target, "flatten": true }),
        );
        br.session = s["sessionId"].as_str().unwrap().to_string();
        for m in ["Page.enable", "Runtime.enable", "Network.enable"] {
            br.call(m, json!({}));
        }
        br.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false }),
        );
        br.call("Page.navigate", json!({ "url": url }));
        br.wait_until("document.readyState === 'complete'", 30);
        br
    }

    /// Send one command and wait for its reply (events met meanwhile: requests noted).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if !self.session.is_empty() {
            msg["sessionId"] = json!(self.session);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).expect("write to chromium");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = match self.from.recv_timeout(left) {
                Ok(v) => v,
                Err(RecvTimeoutError::Timeout) => {
                    panic!("chromium did not answer {method} in 60 s")
                }
                Err(RecvTimeoutError::Disconnected) => panic!("chromium ended during {method}"),
            };
            if v["method"] == "Network.requestWillBeSent" {
                let url = v["params"]["request"]["url"].as_str().unwrap_or("");
                self.requests.push(url.to_string());
            }
            if v["id"] == json!(id) {
                if let Some(e) = v.get("error") {
                    panic!("{method}: {e}");
                }
                return v["result"].clone();
            }
        }
    }

    /// The value of a script expression in the page (a promise is awaited).
    pub fn eval(&mut self, js: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({ "expression": js, "returnByValue": true, "awaitPromise": true }),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("script failed: {js}\n{e}");
        }
        r["result"]["value"].clone()
    }

    /// Wait until script `cond` is true in the page.
    pub fn wait_until(&mut self, cond: &str, secs: u64) {
        let end = Instant::now() + Duration::from_secs(secs);
        while self.eval(&format!("!!({cond})")) != json!(true) {
            assert!(Instant::now() < end, "not true within {secs} s: {cond}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A click at page coordinates (CSS pixels of the viewport), as a mouse makes it.
    pub fn click(&mut self, x: f64, y: f64) {
        self.mouse("mouseMoved", x, y);
        self.mouse("mousePressed", x, y);
        self.mouse("mouseReleased", x, y);
    }

    /// A drag with the left button from one point to another.
    pub fn drag(&mut self, from: (f64, f64), to: (f64, f64)) {
        self.mouse("mouseMoved", from.0, from.1);
        self.mouse("mousePressed", from.0, from.1);
        for k in 1..=5 {
            let f = k as f64 / 5.0;
            let (x, y) = (from.0 + (to.0 - from.0) * f, from.1 + (to.1 - from.1) * f);
            self.call(
                "Input.dispatchMouseEvent",
                json!({ "type": "mouseMoved", "x": x, "y": y, "button": "left", "buttons": 1 }),
            );
        }
        self.mouse("mouseReleased", to.0, to.1);
    }

    fn mouse(&mut self, kind: &str, x: f64, y: f64) {
        self.call(
            "Input.dispatchMouseEvent",
            json!({ "type": kind, "x": x, "y": y, "button": "left", "clickCount": 1 }),
        );
    }

    /// Click the centre of the element `selector` finds (scrolled into view first).
    pub fn click_on(&mut self, selector: &str) {
        let r = self.eval(&format!(
            "(() => {{ const e = document.querySelector({s}); if (!e) return null; \
             e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect(); \
             return [r.left + r.width / 2, r.top + r.height / 2]; }})()",
            s = json!(selector)
        ));
        assert!(r.is_array(), "no element {selector}");
        self.click(r[0].as_f64().unwrap(), r[1].as_f64().unwrap());
    }

    /// Type `text` into the focused element, as a keyboard would (input events fire).
    pub fn type_text(&mut self, text: &str) {
        self.call("Input.insertText", json!({ "text": text }));
    }

    /// A PNG of the whole page (beyond the window) to `path`.
    pub fn screenshot(&mut self, path: &Path) {
        let r = self.call(
            "Page.captureScreenshot",
            json!({ "format": "png", "captureBeyondViewport": true }),
        );
        let png = base64(r["data"].as_str().unwrap());
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn base64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let b: Vec<u8> = s
        .bytes()
        .filter(|&c| c != b'=' && c != b'\n')
        .map(val)
        .collect();
    let mut out = Vec::with_capacity(b.len() * 3 / 4);
    for ch in b.chunks(4) {
        let n = ch
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &v)| n | (v as u32) << (18 - 6 * i));
        out.extend_from_slice(&n.to_be_bytes()[1..ch.len()]);
    }
    out
}
