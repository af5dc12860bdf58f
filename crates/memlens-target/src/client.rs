//! The client of a target's control socket: one request line, one reply line (`ok …` / `error …`).
use crate::proc::{runtime_loaded, ProcStatus};
use crate::reply::Reply;
use crate::socket::{connect, locate};
use anyhow::{anyhow, bail, Context, Result};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What makes a process that maps the runtime but has no control socket open one (memlens-attach's
/// ptrace call of the runtime's `memlens_ctl_open`): registered by the binary with
/// [`set_socket_opener`], since this crate is below memlens-attach. Ok(true): opened now.
type Opener = fn(i32) -> Result<bool>;
static OPENER: std::sync::OnceLock<Opener> = std::sync::OnceLock::new();

/// Register how [`Target`] makes a runtime without a socket open one (once; later calls are
/// ignored). Without it, such a process is an error that says why it has none.
pub fn set_socket_opener(open: Opener) {
    let _ = OPENER.set(open);
}

/// A process running the memlens runtime that we may control, and where its control socket is.
#[derive(Debug, Clone)]
pub struct Target {
    /// Process id, as we see it (the host pid of a process in a container).
    pub pid: i32,
    /// Its pid in its own pid namespace (what it calls itself; `pid` outside containers).
    pub ns_pid: i32,
    /// Its owner, as we see it.
    pub uid: u32,
    /// Its command name.
    pub comm: String,
    /// Directory of its control socket, from here.
    pub dir: PathBuf,
    /// The control socket, from here (under `/proc/PID/root` when the process has its own root).
    pub sock: PathBuf,
    /// The process's root when it is not ours (a container's): its files are under it.
    pub root: Option<PathBuf>,
    /// The uid we connect as (root into a user namespace that does not map root).
    connect_uid: Option<u32>,
}

impl Target {
    /// Check the process exists and is ours (or we are root), and locate its socket.
    pub fn find(pid: i32) -> Result<Target> {
        let status = ProcStatus::of(pid)?;
        let comm = status.field("Name:").unwrap_or("?").to_string();
        let uid = status
            .uid()
            .ok_or_else(|| anyhow!("cannot read the owner of process {pid}"))?;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if me != 0 && me != uid {
            bail!("permission denied: process {pid} belongs to uid {uid} (only its owner or root can control it)");
        }
        let at = locate(pid, uid, &status);
        Ok(Target {
            pid,
            ns_pid: at.ns_pid,
            uid,
            comm,
            dir: at.dir,
            sock: at.sock,
            root: at.root,
            connect_uid: at.connect_uid,
        })
    }

    /// Send one request line and return the `ok` reply, parsed; an `error` reply (or one that
    /// cannot be parsed) becomes an error.
    pub fn request(&self, line: &str) -> Result<Reply> {
        let mut s = self.connect()?;
        s.set_read_timeout(Some(Duration::from_secs(120))).ok();
        s.set_write_timeout(Some(Duration::from_secs(10))).ok();
        // The runtime may refuse us and close before reading (peer check): its reply is still
        // there to read, and says more than the broken pipe would.
        let sent = s.write_all(format!("{line}\n").as_bytes());
        let mut text = String::new();
        let got = s.read_to_string(&mut text);
        if let (Err(e), true) = (sent, text.trim().is_empty()) {
            return Err(anyhow!(e).context(format!(
                "cannot send to the control socket {}",
                self.sock.display()
            )));
        }
        got.with_context(|| {
            format!(
                "no reply from process {} on {}",
                self.pid,
                self.sock.display()
            )
        })?;
        let text = text.trim();
        if let Some(rest) = text.strip_prefix("ok") {
            return Reply::parse(rest)
                .map_err(|e| anyhow!("process {}: malformed reply '{text}': {e}", self.pid));
        }
        match text.strip_prefix("error ") {
            Some(e) => bail!("process {}: {e}", self.pid),
            None if text.is_empty() => bail!(
                "process {} closed its control socket without a reply",
                self.pid
            ),
            None => bail!("process {}: unexpected reply '{text}'", self.pid),
        }
    }

    fn connect(&self) -> Result<UnixStream> {
        match connect(&self.sock, self.connect_uid) {
            Ok(s) => Ok(s),
            Err(e) if e.kind() == ErrorKind::NotFound && runtime_loaded(self.pid) => {
                self.open_and_connect()
            }
            Err(e) if e.kind() == ErrorKind::NotFound => bail!(
                "process {} ({}) is not running under memlens (no control socket {}); start it with `memlens run`",
                self.pid,
                self.comm,
                self.sock.display()
            ),
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => bail!(
                "process {} ({}) is not running under memlens (stale control socket {}: nobody listens)",
                self.pid,
                self.comm,
                self.sock.display()
            ),
            Err(e) if e.kind() == ErrorKind::PermissionDenied => bail!(
                "permission denied: cannot connect to {} (process {} belongs to uid {})",
                self.sock.display(),
                self.pid,
                self.uid
            ),
            Err(e) => Err(anyhow!(e).context(format!("cannot connect to {}", self.sock.display()))),
        }
    }

    /// The process runs the runtime but has no socket (a fork child that has not allocated since
    /// it lived 200 ms): have it open one now through the opener the binary registered (ptrace,
    /// memlens-attach), and connect once it listens.
    fn open_and_connect(&self) -> Result<UnixStream> {
        let Some(open) = OPENER.get() else {
            bail!("{}", self.no_socket_reason());
        };
        if let Err(e) = open(self.pid) {
            bail!(
                "{}; memlens could not make it open one: {e:#}",
                self.no_socket_reason()
            );
        }
        // The runtime's new thread binds the socket itself: wait for it to listen.
        let t0 = Instant::now();
        loop {
            match connect(&self.sock, self.connect_uid) {
                Ok(s) => return Ok(s),
                Err(_) if t0.elapsed() < Duration::from_secs(5) => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(e) => bail!(
                    "{}; made to open one, it did not listen within 5 s: {e}",
                    self.no_socket_reason()
                ),
            }
        }
    }

    /// Why a process that runs the runtime has no socket where we look: a child forked from a
    /// process under memlens that has not opened its own yet, or a runtime that could not open
    /// one (its directory missing or refused: the program's stderr says why).
    fn no_socket_reason(&self) -> String {
        let who = format!("process {} ({})", self.pid, self.comm);
        let parent_has_runtime = ProcStatus::read(self.pid)
            .ok()
            .flatten()
            .and_then(|s| s.field("PPid:")?.parse::<i32>().ok())
            .is_some_and(|pp| pp > 1 && runtime_loaded(pp));
        let place = match &self.root {
            Some(r) => format!(" (in its own root, {})", r.display()),
            None => String::new(),
        };
        if parent_has_runtime {
            return format!(
                "{who} runs the memlens runtime but has no control socket {}{place}: a child forked \
                 from a process under memlens opens its own once it has lived 200 ms and allocates, \
                 or when memlens makes it (ptrace: its owner or root), or the program closed the \
                 runtime's descriptor",
                self.sock.display()
            );
        }
        let dir = if self.dir.is_dir() {
            "its control directory is there but holds no socket of this process"
        } else {
            "its control directory does not exist"
        };
        format!(
            "{who} runs the memlens runtime but has no control socket {}{place}: {dir}; the runtime \
             could not open one (the program's stderr says why: 'memlens: control socket disabled: \
             …'), or it was started with another MEMLENS_CTL_DIR",
            self.sock.display()
        )
    }

    /// Is the control socket there and answering?
    pub fn ready(&self) -> bool {
        connect(&self.sock, self.connect_uid).is_ok()
    }

    /// Ask for the status line.
    pub fn status(&self) -> Result<Reply> {
        self.request("status")
    }

    /// Start sampling, optionally at a new interval.
    pub fn start(&self, interval: Option<u64>) -> Result<Reply> {
        match interval {
            Some(iv) => self.request(&format!("start {iv}")),
            None => self.request("start"),
        }
    }

    /// Stop sampling.
    pub fn stop(&self) -> Result<Reply> {
        self.request("stop")
    }

    /// Ask the process for a raw dump and copy it to `path`. The process writes dumps only into its
    /// control directory (a peer must not make it write anywhere else); memlens copies the file out
    /// with its own rights and removes it. The directory is the process owner's: what is there
    /// under that name is copied only if it is a regular file (not a link, a FIFO or a device),
    /// and only the bytes it had when opened.
    pub fn dump_raw(&self, path: &Path) -> Result<()> {
        let raw = self.dump_in_dir()?;
        let r = memlens_profile::copy_regular(&raw, memlens_profile::Links::Refuse, path);
        std::fs::remove_file(&raw).ok();
        r
    }

    /// Have the process write a raw dump into its control directory; returns its path there.
    fn dump_in_dir(&self) -> Result<PathBuf> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let name = format!(
            "{}.dump-{}-{nanos}-{}.raw",
            self.pid,
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        self.request(&format!("dump {name}"))?;
        Ok(self.dir.join(name))
    }

    /// Have the process dump, read the raw dump back from the control directory and remove it: the
    /// dump in memory, and no file left anywhere (for `memlens serve`, which makes one per scrape).
    pub fn read_dump(&self) -> Result<memlens_profile::RawDump> {
        let raw = self.dump_in_dir()?;
        let r = memlens_profile::read_raw(&raw);
        std::fs::remove_file(&raw).ok();
        r
    }

    /// Dump to a raw file in the socket directory (the process may write there), convert it to pprof
    /// at `out` (the profile crate's reader, symbolizer and writer), and remove the raw file.
    pub fn dump_pprof(&self, out: &Path) -> Result<memlens_profile::ConvertSummary> {
        let raw = self.dump_in_dir()?;
        let r = memlens_profile::convert_raw_in(&raw, out, &self.files()).with_context(|| {
            format!(
                "cannot convert the dump of process {} to {}",
                self.pid,
                out.display()
            )
        });
        std::fs::remove_file(&raw).ok();
        r
    }

    /// Where the process's files are reached from here, for the symbolizer: its root when that
    /// is not ours (a container), its mapped files.
    pub fn files(&self) -> memlens_profile::ProcessFiles {
        memlens_profile::ProcessFiles::of(self.pid, self.root.clone())
    }

    /// Wait until the socket answers (a freshly started program creates it during start-up).
    pub fn wait_ready(&self, timeout: Duration, alive: impl Fn() -> bool) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < timeout && alive() {
            if self.ready() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.ready()
    }
}
