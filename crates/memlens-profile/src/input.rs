//! Opening what memlens reads, bounded in size, time and kind: `memlens report /dev/zero`, a gzip
//! bomb, a FIFO nobody writes to, or a dump that names `/dev/zero` as a module must end within
//! seconds with one error, not fill the memory or hang.
//!
//! Two doors, one for each kind of name:
//!
//! * [`open`]: a profile the user named (`report`, `diff`). A regular file is read as it is,
//!   refused when larger than the input budget. A named FIFO or a character device is opened
//!   without blocking and read with a timeout: no data for [`IDLE_TIMEOUT`] is an error. A
//!   descriptor the shell handed over (`/dev/stdin`, `/dev/fd/N`, `<(curl …)`) is waited for
//!   without a timeout: someone holds its other end.
//! * [`open_regular`] (and [`read_regular`], [`open_regular_input`]): a file memlens did not name
//!   itself and did not create — a module path written in a dump, a state file or a dump in a run
//!   directory others may write to, a file of another process's root. Only a regular file, opened
//!   with `O_NOFOLLOW|O_NONBLOCK` (links resolved by name first where the name may hold them), so
//!   neither a device nor a FIFO is ever opened, let alone read; its size is checked before a
//!   byte is read.
//!
//! Whatever the source, at most [`budget`] bytes are read (and, through the decoders,
//! decompressed and held): `MEMLENS_MAX_INPUT` (a size, default 2 GiB) raises it. Unless it is
//! set, what a decoder may decompress and hold is also at most [`INFLATION`] times the bytes read
//! so far (at least [`FLOOR`]): a valid 5 MB gzip profile that inflates to gigabytes of tiny
//! fields is refused at the floor, 64 MiB held, after its first 64 KiB (it could never hold more
//! than 32 times its 5 MB), not at the budget (an input of 10 MB stays within about 512 MB).
use anyhow::{bail, Context, Result};
use std::fs::{File, Metadata};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a FIFO or device may stay silent.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// Default of [`budget`].
pub const DEFAULT_BUDGET: u64 = 2 << 30;

/// How many times the bytes read a decoder may decompress and hold (unless `MEMLENS_MAX_INPUT`
/// is set). Real profiles inflate 3–6x when gunzipped and hold 15–25x their compressed size
/// (docs/scale.md); a bomb of empty strings inflates 1000x and held 24 bytes for every 2.
pub const INFLATION: u64 = 32;

/// What a decoder may always decompress and hold, however small its input.
pub const FLOOR: u64 = 64 << 20;

/// The most bytes a profile may take to read (file bytes, decompressed bytes, and the memory the
/// decoders charge for what they keep): `MEMLENS_MAX_INPUT` or [`DEFAULT_BUDGET`].
pub fn budget() -> u64 {
    explicit_budget().unwrap_or(DEFAULT_BUDGET)
}

fn explicit_budget() -> Option<u64> {
    std::env::var("MEMLENS_MAX_INPUT")
        .ok()
        .and_then(|v| memlens_measure::units::parse_size(&v).ok())
        .filter(|&v| v > 0)
}

/// What a decoder of one input may decompress and hold by now: [`INFLATION`] times the bytes read
/// so far (at least [`FLOOR`]), never more than the budget; only the budget when the user set it.
#[derive(Clone, Debug)]
pub struct Allowance {
    read: Arc<AtomicU64>,
    budget: u64,
    inflation: bool,
}

impl Allowance {
    /// The allowance of an input read through [`open`] (the budget from the environment).
    fn new() -> Allowance {
        let explicit = explicit_budget();
        Allowance {
            read: Arc::default(),
            budget: explicit.unwrap_or(DEFAULT_BUDGET),
            inflation: explicit.is_none(),
        }
    }

    /// The allowance of `read` bytes already read (compressed sections of a module file).
    pub fn for_bytes(read: u64) -> Allowance {
        let a = Allowance::new();
        a.read.store(read, Ordering::Relaxed);
        a
    }

    /// A fixed allowance (for readers of bytes already in memory).
    #[cfg(test)]
    pub fn fixed(budget: u64) -> Allowance {
        Allowance {
            read: Arc::default(),
            budget,
            inflation: false,
        }
    }

    /// What may be decompressed and held now.
    pub fn now(&self) -> u64 {
        if !self.inflation {
            return self.budget;
        }
        let read = self.read.load(Ordering::Relaxed);
        FLOOR.max(read.saturating_mul(INFLATION)).min(self.budget)
    }

    /// The error when `what` outgrew the allowance.
    pub fn exceeded(&self, what: &str) -> anyhow::Error {
        let limit = self.now();
        if !self.inflation || limit >= self.budget {
            return over_budget(what, limit);
        }
        let read = self.read.load(Ordering::Relaxed);
        anyhow::Error::new(OverBudget {
            what: what.to_string(),
            budget: limit,
            why: Some(format!(
                ", what {} of input may become ({INFLATION} times as much, at least {})",
                size(read),
                size(FLOOR)
            )),
        })
    }
}

fn size(b: u64) -> String {
    memlens_measure::units::format_size(b)
}
/// The error when a budget is exhausted (also carried inside an `io::Error` by the readers).
#[derive(Debug, Clone)]
pub struct OverBudget {
    what: String,
    budget: u64,
    /// Why the limit is what it is, when it is not the budget.
    why: Option<String>,
}

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is larger than {}{} (not a profile memlens reads; a gzip bomb?); \
             MEMLENS_MAX_INPUT=SIZE raises the limit",
            self.what,
            size(self.budget),
            self.why.as_deref().unwrap_or("")
        )
    }
}

impl std::error::Error for OverBudget {}

/// The error when `what` exceeds `budget`.
pub fn over_budget(what: &str, budget: u64) -> anyhow::Error {
    anyhow::Error::new(OverBudget {
        what: what.to_string(),
        budget,
        why: None,
    })
}

/// An opened profile: its first bytes (to tell the format) and a reader of all of it.
pub struct Input {
    /// Up to [`HEAD`] first bytes (fewer only when the input is that short).
    pub head: Vec<u8>,
    rest: Box<dyn Read + Send>,
    /// What its decoders may decompress and hold, growing with the bytes read.
    pub allowance: Allowance,
}

/// How many first bytes [`Input::head`] holds.
pub const HEAD: usize = 16;

impl Input {
    /// The whole input, from its first byte.
    pub fn reader(self) -> impl Read + Send {
        std::io::Cursor::new(self.head).chain(self.rest)
    }

    /// `r` capped at the budget, counted into the allowance, with its first bytes read.
    fn start(r: Box<dyn Read + Send>, what: String) -> Result<Input> {
        let allowance = Allowance::new();
        let budget = allowance.budget;
        let mut rest: Box<dyn Read + Send> = Box::new(Capped {
            r,
            left: budget,
            budget,
            what: what.clone(),
            read: allowance.read.clone(),
        });
        let mut head = vec![0; HEAD];
        let mut n = 0;
        while n < HEAD {
            match rest.read(&mut head[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e).with_context(|| format!("cannot read {what}")),
            }
        }
        head.truncate(n);
        Ok(Input {
            head,
            rest,
            allowance,
        })
    }
}

/// Open `path`, a profile the user named, for reading (see the module docs for what is refused
/// and bounded).
pub fn open(path: &Path) -> Result<Input> {
    let shown = path.display();
    let meta = std::fs::metadata(path).with_context(|| format!("cannot read {shown}"))?;
    let ft = meta.file_type();
    let budget = budget();
    let rest: Box<dyn Read + Send> = if ft.is_dir() {
        bail!("cannot read {shown}: it is a directory, not a profile");
    } else if ft.is_file() {
        if meta.len() > budget {
            return Err(over_budget(&shown.to_string(), budget));
        }
        Box::new(File::open(path).with_context(|| format!("cannot read {shown}"))?)
    } else if ft.is_fifo() || ft.is_char_device() {
        // Never block in open(): a FIFO without a writer would.
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .with_context(|| format!("cannot read {shown}"))?;
        Box::new(Polled {
            f,
            timeout: (!handed_over(path)).then_some(IDLE_TIMEOUT),
            what: format!("{shown} ({})", kind(&ft)),
            started: false,
        })
    } else {
        bail!("cannot read {shown}: it is {}, not a profile", kind(&ft));
    };
    Input::start(rest, shown.to_string())
}

/// How [`open_regular`] treats symbolic links in the name it is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Links {
    /// Resolve them by name first (`realpath`, which opens nothing), then open the file itself
    /// with `O_NOFOLLOW`: for paths another file or process wrote (module paths, whose libraries
    /// are often links: `libstdc++.so.6`).
    Resolve,
    /// A link is refused: for names in a directory others may write to (a run directory, a
    /// control directory), where memlens named the file and the runtime created it.
    Refuse,
    /// Followed by open(2): only for names that must resolve in another root
    /// (`/proc/PID/root/…`, where `realpath` would resolve to this root). Checked by `stat`
    /// before the open (nothing but a regular file is opened) and `fstat` after (the same file).
    Follow,
}

/// Open `path`, a file memlens did not create and the user did not name, to read: only a regular
/// file, never following a link at its last component (after resolving as `links` says), never
/// blocking, never opening a device or a FIFO, and no larger than the input budget. Returns the
/// file and its metadata (from the descriptor).
pub fn open_regular(path: &Path, links: Links) -> Result<(File, Metadata)> {
    let shown = path.display();
    let real: PathBuf = match links {
        Links::Resolve => {
            std::fs::canonicalize(path).with_context(|| format!("cannot read {shown}"))?
        }
        Links::Refuse | Links::Follow => path.to_path_buf(),
    };
    let before = match links {
        Links::Follow => std::fs::metadata(&real),
        _ => std::fs::symlink_metadata(&real),
    }
    .with_context(|| format!("cannot read {shown}"))?;
    if !before.is_file() {
        let resolved = if real != path {
            format!(" ({})", real.display())
        } else {
            String::new()
        };
        bail!(
            "{shown}{resolved} is {}, not a regular file",
            kind(&before.file_type())
        );
    }
    let mut flags = libc::O_NONBLOCK | libc::O_NOCTTY;
    if links != Links::Follow {
        flags |= libc::O_NOFOLLOW;
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(&real)
        .with_context(|| format!("cannot read {shown}"))?;
    let m = f
        .metadata()
        .with_context(|| format!("cannot read {shown}"))?;
    if !m.is_file() || (m.dev(), m.ino()) != (before.dev(), before.ino()) {
        bail!("cannot read {shown}: it was replaced while memlens opened it");
    }
    let budget = budget();
    if m.len() > budget {
        return Err(over_budget(&shown.to_string(), budget));
    }
    Ok((f, m))
}

/// The bytes of `path` (opened by [`open_regular`]), at most `max` of them: more is an error.
pub fn read_regular(path: &Path, links: Links, max: u64) -> Result<Vec<u8>> {
    let (f, m) = open_regular(path, links)?;
    if m.len() > max {
        return Err(over_budget(&path.display().to_string(), max));
    }
    let mut v = Vec::with_capacity(m.len() as usize);
    f.take(max + 1)
        .read_to_end(&mut v)
        .with_context(|| format!("cannot read {}", path.display()))?;
    if v.len() as u64 > max {
        return Err(over_budget(&path.display().to_string(), max));
    }
    Ok(v)
}

/// Copy `from` (opened by [`open_regular`]) to `to`: no more than its size when it was opened.
pub fn copy_regular(from: &Path, links: Links, to: &Path) -> Result<()> {
    let (f, meta) = open_regular(from, links)?;
    let mut out = File::create(to).with_context(|| format!("cannot write {}", to.display()))?;
    std::io::copy(&mut f.take(meta.len()), &mut out)
        .with_context(|| format!("cannot write {}", to.display()))?;
    Ok(())
}

/// [`open_regular`] as an [`Input`], for the readers of dumps in directories others may write to.
pub fn open_regular_input(path: &Path, links: Links) -> Result<Input> {
    let (f, _) = open_regular(path, links)?;
    Input::start(Box::new(f), path.display().to_string())
}

/// A reader that fails, instead of ending, past `budget` bytes: a truncated stream would read as a
/// corrupt profile, and the user must learn the real reason. It counts what it read into `read`.
struct Capped {
    r: Box<dyn Read + Send>,
    left: u64,
    budget: u64,
    what: String,
    read: Arc<AtomicU64>,
}

impl Read for Capped {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            // One byte more tells a stream that ends exactly at the budget from one that goes on.
            let mut one = [0u8; 1];
            return match self.r.read(&mut one)? {
                0 => Ok(0),
                _ => Err(std::io::Error::other(OverBudget {
                    what: self.what.clone(),
                    budget: self.budget,
                    why: None,
                })),
            };
        }
        let want = buf.len().min(self.left.min(usize::MAX as u64) as usize);
        let n = self.r.read(&mut buf[..want])?;
        self.left -= n as u64;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// What a file of type `ft` is, with its article: "a FIFO", "a directory".
pub fn kind(ft: &std::fs::FileType) -> &'static str {
    if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_block_device() {
        "a block device"
    } else {
        "a regular file"
    }
}

/// A descriptor of this process given by name (`/dev/stdin`, `/dev/fd/N`, `/proc/self/fd/N`): its
/// writer exists (a pipe from the shell), maybe slow, so it is not timed out.
fn handed_over(path: &Path) -> bool {
    let s = path.to_string_lossy();
    s == "/dev/stdin" || s.starts_with("/dev/fd/") || s.starts_with("/proc/self/fd/")
}

/// A non-blocking descriptor read with poll(): an error when nothing comes for `timeout`.
struct Polled {
    f: File,
    timeout: Option<Duration>,
    what: String,
    /// Something was read: an end of file is then the writer's end.
    started: bool,
}

impl Polled {
    /// Wait until the descriptor has something (data, or a writer that came and left); false when
    /// the timeout passed first.
    fn wait(&self) -> std::io::Result<Option<i16>> {
        let mut p = libc::pollfd {
            fd: self.f.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = self.timeout.map_or(-1, |t| t.as_millis() as libc::c_int);
        loop {
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut p, 1, ms) };
            if n >= 0 {
                return Ok((n > 0).then_some(p.revents));
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    fn timed_out(&self) -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "nothing to read from {} for {} s (is anything writing to it?)",
                self.what,
                IDLE_TIMEOUT.as_secs()
            ),
        )
    }
}

impl Read for Polled {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // A FIFO nobody has opened for writing reads as ended at once: give a writer the time
        // to come (a hang-up tells one came and left).
        let mut hung_up = false;
        loop {
            match self.f.read(buf) {
                Ok(0) if self.started || hung_up || buf.is_empty() => return Ok(0),
                Ok(0) => {}
                Ok(n) => {
                    self.started = true;
                    return Ok(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            match self.wait()? {
                None => return Err(self.timed_out()),
                Some(ev) => hung_up = ev & libc::POLLHUP != 0,
            }
        }
    }
}
