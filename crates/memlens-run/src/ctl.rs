//! `memlens ctl PID …`: talk to the control socket of a process running under the runtime.
//!
//! The runtime (runtime/src/ctl.c) listens on `$MEMLENS_CTL_DIR/<pid>.<pidns>.sock` (default
//! `/tmp/memlens-<euid>`, directory 0700, socket 0600) and checks every peer's credentials
//! (SO_PEERCRED: our uid or root). One request line, one reply line (`ok …` / `error …`).
//! This module is also the client used by `memlens run --start-on-growth/--dump-every`.
use anyhow::{anyhow, bail, Context, Result};
use memlens_measure::error::usage;
use memlens_measure::units::{format_size, parse_size};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const EXAMPLE: &str = "Example:
  memlens run --inactive -o server.pb.gz -- ./server &
  memlens ctl 1234 start --interval 64K
  memlens ctl 1234 dump -o before.pb.gz
  memlens ctl 1234 status
  memlens ctl 1234 stop

Only the user owning the process (or root) can control it: the socket directory is 0700, the
socket 0600, and the runtime checks the peer's uid (SO_PEERCRED) on every connection.";

/// Control a process running under the runtime
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLE)]
pub struct CtlArgs {
    /// Process id of a program running under memlens (`memlens run`)
    #[arg(value_name = "PID")]
    pub pid: String,
    #[command(subcommand)]
    /// What to do.
    pub action: CtlAction,
}

#[derive(Debug, clap::Subcommand)]
/// The requests `memlens ctl` sends.
pub enum CtlAction {
    /// Start sampling
    Start {
        /// Mean sampling interval (e.g. 64K, 512KiB, 2M; 0 = every allocation)
        #[arg(long, value_name = "SIZE")]
        interval: Option<String>,
    },
    /// Stop sampling (what was recorded is kept)
    Stop,
    /// Write the process's profile now (gzipped pprof)
    Dump {
        /// Output file [default: memlens.<comm>.<pid>.<n>.pb.gz]
        #[arg(short = 'o', long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Write the runtime's raw dump instead of pprof (the process itself writes FILE)
        #[arg(long)]
        raw: bool,
    },
    /// Zero the cumulative counts (live-heap records are kept)
    Reset,
    /// Show whether sampling is on, the interval and what was recorded
    Status,
}

/// Run `memlens ctl`; returns the exit status.
pub fn run_ctl(args: CtlArgs) -> Result<i32> {
    let pid = parse_pid(&args.pid)?;
    let t = Target::find(pid)?;
    match args.action {
        CtlAction::Start { interval } => {
            let iv = interval.as_deref().map(parse_size).transpose()?;
            let r = t.start(iv)?;
            let was = if r.get("was") == Some("1") {
                " (it was already on)"
            } else {
                ""
            };
            let iv = r
                .num("interval")
                .map(format_size)
                .unwrap_or_else(|| "?".into());
            println!(
                "process {} ({}): sampling started, interval {iv}{was}",
                t.pid, t.comm
            );
        }
        CtlAction::Stop => {
            let r = t.stop()?;
            let was = if r.get("was") == Some("0") {
                " (it was already off)"
            } else {
                ""
            };
            println!("process {} ({}): sampling stopped{was}", t.pid, t.comm);
        }
        CtlAction::Dump { output, raw } => {
            let out = match output {
                Some(o) => o,
                None => default_dump_name(&t.comm, t.pid, raw),
            };
            if raw {
                t.dump_raw(&absolute(&out)?)?;
                println!(
                    "process {} ({}): raw dump written to {}",
                    t.pid,
                    t.comm,
                    out.display()
                );
            } else {
                let s = t.dump_pprof(&out)?;
                println!(
                    "process {} ({}): profile written to {} ({} samples, {} stacks, {} allocated, {} live)",
                    t.pid,
                    t.comm,
                    out.display(),
                    s.samples,
                    s.stacks,
                    format_size(s.alloc_bytes as u64),
                    format_size(s.inuse_bytes as u64)
                );
            }
        }
        CtlAction::Reset => {
            t.request("reset")?;
            println!("process {} ({}): counters reset", t.pid, t.comm);
        }
        CtlAction::Status => print_status(&t, &t.status()?),
    }
    Ok(0)
}

fn print_status(t: &Target, r: &Reply) {
    let n = |k: &str| {
        r.num(k)
            .map(|v| v.to_string())
            .unwrap_or_else(|| "n/a".into())
    };
    let samples = r.num("samples").unwrap_or(0);
    let truncated = r.num("truncated").unwrap_or(0);
    let share = if samples > 0 {
        format!(
            "{:.1}% of samples",
            100.0 * truncated as f64 / samples as f64
        )
    } else {
        "no samples yet".into()
    };
    let state = if r.get("active") == Some("1") {
        "active"
    } else {
        "inactive"
    };
    let iv = match r.num("interval") {
        Some(0) => "exact (every allocation)".to_string(),
        Some(v) => format!("{} ({v} bytes)", format_size(v)),
        None => "n/a".into(),
    };
    println!("process {} ({})", t.pid, t.comm);
    println!("  sampling       {state}");
    println!("  interval       {iv}");
    println!("  samples        {}", n("samples"));
    let bytes = r
        .num("alloc_bytes")
        .map(format_size)
        .unwrap_or_else(|| "n/a".into());
    println!("  allocated      {bytes} (estimated from the samples)");
    let limit = r
        .num("max_stacks")
        .map_or(String::new(), |m| format!(" (table holds {m})"));
    println!("  stacks         {}{limit}", n("stacks"));
    println!("  truncated      {} ({share})", n("truncated"));
    let dropped_bytes = match r.num("dropped_bytes") {
        Some(b) if b > 0 => format!(" ({} not in the profile)", format_size(b)),
        _ => String::new(),
    };
    let full = match r.num("table_full") {
        Some(f) if f > 0 => format!("; {f} because the stack table was full (raise --max-stacks)"),
        _ => String::new(),
    };
    println!("  dropped        {}{dropped_bytes}{full}", n("dropped"));
}

fn parse_pid(s: &str) -> Result<i32> {
    match s.parse::<i32>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(usage(format!("'{s}' is not a process id"))),
    }
}

fn absolute(p: &Path) -> Result<PathBuf> {
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    Ok(std::env::current_dir()
        .context("cannot read the current directory")?
        .join(p))
}

/// `memlens.<comm>.<pid>.<n>.pb.gz` with the first n not yet taken in the current directory.
pub fn default_dump_name(comm: &str, pid: i32, raw: bool) -> PathBuf {
    let ext = if raw { "raw" } else { "pb.gz" };
    let comm: String = comm
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    (1..)
        .map(|n| PathBuf::from(format!("memlens.{comm}.{pid}.{n}.{ext}")))
        .find(|p| !p.exists())
        .expect("an unused name exists")
}

/// A reply line `ok key=value …` split into its fields.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The whole line.
    pub text: String,
}

impl Reply {
    /// The value of `key=value`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.text
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
    }
    /// The value of `key=value` as a number.
    pub fn num(&self, key: &str) -> Option<u64> {
        self.get(key)?.parse().ok()
    }
}

/// A process we may control, and where its control socket is.
#[derive(Debug, Clone)]
pub struct Target {
    /// Process id.
    pub pid: i32,
    /// Its owner.
    pub uid: u32,
    /// Its command name.
    pub comm: String,
    /// Directory of its control socket.
    pub dir: PathBuf,
    /// The control socket.
    pub sock: PathBuf,
}

/// A process's `/proc/PID/status`: who owns it, what it is called, what state it is in.
pub struct ProcStatus(String);

impl ProcStatus {
    /// Read it: `Ok(None)` when there is no such process.
    pub fn read(pid: i32) -> std::io::Result<Option<ProcStatus>> {
        match std::fs::read_to_string(format!("/proc/{pid}/status")) {
            Ok(s) => Ok(Some(ProcStatus(s))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Read it, or the one-line error a command gives for a process that is not there.
    pub fn of(pid: i32) -> Result<ProcStatus> {
        Self::read(pid)
            .with_context(|| format!("cannot read /proc/{pid}/status"))?
            .ok_or_else(|| anyhow!("no process with PID {pid} (it is not running)"))
    }

    /// The value of a field (`"Name:"`, `"State:"`, …), trimmed.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.0
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    }

    /// The owner: the process's effective uid (the second of `Uid:`).
    pub fn uid(&self) -> Option<u32> {
        self.field("Uid:")?.split_whitespace().nth(1)?.parse().ok()
    }
}

/// Is this mapping (a `/proc/PID/maps` path, or the whole line) the memlens runtime — preloaded
/// from its file, or attached from a memfd?
pub fn is_runtime_path(path: &str) -> bool {
    path.contains("memfd:memlens") || path.ends_with("/libmemlens.so")
}

/// Is the memlens runtime mapped into `pid`?
fn runtime_loaded(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .is_ok_and(|m| m.lines().any(is_runtime_path))
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
        let dir = ctl_dir(pid, uid);
        let sock = socket_path(&dir, pid, &status);
        Ok(Target {
            pid,
            uid,
            comm,
            dir,
            sock,
        })
    }

    /// Send one request line and return the `ok` reply; an `error` reply becomes an error.
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
            return Ok(Reply {
                text: rest.trim().to_string(),
            });
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
        match UnixStream::connect(&self.sock) {
            Ok(s) => Ok(s),
            Err(e) if e.kind() == ErrorKind::NotFound && runtime_loaded(self.pid) => bail!(
                "process {} ({}) runs the memlens runtime but has no control socket {}: a forked child \
                 opens its own once it has lived 200 ms and allocates (or the program closed the runtime's \
                 descriptor); try again when it is busy",
                self.pid,
                self.comm,
                self.sock.display()
            ),
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

    /// Is the control socket there and answering?
    pub fn ready(&self) -> bool {
        UnixStream::connect(&self.sock).is_ok()
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
    /// with its own rights and removes it.
    pub fn dump_raw(&self, path: &Path) -> Result<()> {
        let raw = self.dump_in_dir()?;
        let r = std::fs::copy(&raw, path)
            .map(|_| ())
            .with_context(|| format!("cannot write {}", path.display()));
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

    /// Dump to a raw file in the socket directory (the process may write there), convert it to pprof
    /// at `out`, and remove the raw file.
    pub fn dump_pprof(&self, out: &Path) -> Result<memlens_profile::ConvertSummary> {
        let raw = self.dump_in_dir()?;
        let r = convert(&raw, out).with_context(|| {
            format!(
                "cannot convert the dump of process {} to {}",
                self.pid,
                out.display()
            )
        });
        std::fs::remove_file(&raw).ok();
        r
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

/// Raw dump → gzipped pprof (the profile crate's reader, symbolizer and writer).
fn convert(raw: &Path, out: &Path) -> Result<memlens_profile::ConvertSummary> {
    memlens_profile::convert_raw(raw, out)
}

/// The control socket of `pid` in `dir`: `<pid>.<pidns>.sock`, named by the process's own pid and
/// the inode of its pid namespace (so containers sharing the directory never collide). A process in
/// another pid namespace knows itself by the last `NSpid:` entry of its status.
fn socket_path(dir: &Path, pid: i32, status: &ProcStatus) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let own_pid = status
        .field("NSpid:")
        .and_then(|v| v.split_whitespace().last()?.parse::<i32>().ok())
        .unwrap_or(pid);
    let ns = std::fs::metadata(format!("/proc/{pid}/ns/pid"))
        .map(|m| m.ino())
        .unwrap_or(0);
    let sock = dir.join(format!("{own_pid}.{ns}.sock"));
    let legacy = dir.join(format!("{own_pid}.sock"));
    if !sock.exists() && legacy.exists() {
        return legacy; // a runtime older than the namespace-qualified names
    }
    sock
}

/// The socket directory of process `pid`: ours if MEMLENS_CTL_DIR is set here, else the one in the
/// process's environment (readable for its owner and root), else the default of its owner.
fn ctl_dir(pid: i32, uid: u32) -> PathBuf {
    if let Some(d) = std::env::var_os("MEMLENS_CTL_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) {
        for kv in env.split(|&b| b == 0) {
            if let Some(v) = kv.strip_prefix(b"MEMLENS_CTL_DIR=".as_slice()) {
                if !v.is_empty() {
                    return PathBuf::from(String::from_utf8_lossy(v).into_owned());
                }
            }
        }
    }
    PathBuf::from(format!("/tmp/memlens-{uid}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_fields() {
        let r = Reply {
            text: "pid=12 active=1 interval=65536 samples=7".into(),
        };
        assert_eq!(r.get("active"), Some("1"));
        assert_eq!(r.num("interval"), Some(65536));
        assert_eq!(r.num("pid"), Some(12));
        assert_eq!(r.get("missing"), None);
    }

    #[test]
    fn pids() {
        assert!(parse_pid("0").is_err());
        assert!(parse_pid("-3").is_err());
        assert!(parse_pid("abc").is_err());
        assert_eq!(parse_pid("42").unwrap(), 42);
    }
}
