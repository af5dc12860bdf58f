//! Opening a profile to read, bounded in size, time and kind: `memlens report /dev/zero`, a gzip bomb
//! or a FIFO nobody writes to must end within seconds with one error, not fill the memory or hang.
//!
//! * A regular file is read as it is, refused when larger than the input budget.
//! * A named FIFO or a character device is opened without blocking and read with a timeout: no data
//!   for [`IDLE_TIMEOUT`] is an error. A descriptor the shell handed over (`/dev/stdin`,
//!   `/dev/fd/N`, `<(curl …)`) is waited for without a timeout: someone holds its other end.
//! * Whatever the source, at most [`budget`] bytes are read (and, through the decoders, decompressed
//!   and held): `MEMLENS_MAX_INPUT` (a size, default 2 GiB) raises it.
use anyhow::{bail, Context, Result};
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

/// How long a FIFO or device may stay silent.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// Default of [`budget`].
pub const DEFAULT_BUDGET: u64 = 2 << 30;

/// The most bytes a profile may take to read (file bytes, decompressed bytes, and the memory the
/// decoders charge for what they keep): `MEMLENS_MAX_INPUT` or [`DEFAULT_BUDGET`].
pub fn budget() -> u64 {
    std::env::var("MEMLENS_MAX_INPUT")
        .ok()
        .and_then(|v| memlens_measure::units::parse_size(&v).ok())
        .filter(|&v| v > 0)
        .unwrap_or(DEFAULT_BUDGET)
}

/// The error when a budget is exhausted (also carried inside an `io::Error` by the readers).
#[derive(Debug, Clone)]
pub struct OverBudget {
    what: String,
    budget: u64,
}

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is larger than {} (not a profile memlens reads; a gzip bomb?); \
             MEMLENS_MAX_INPUT=SIZE raises the limit",
            self.what,
            memlens_measure::units::format_size(self.budget)
        )
    }
}

impl std::error::Error for OverBudget {}

/// The error when `what` exceeds `budget`.
pub fn over_budget(what: &str, budget: u64) -> anyhow::Error {
    anyhow::Error::new(OverBudget {
        what: what.to_string(),
        budget,
    })
}

/// An opened profile: its first bytes (to tell the format) and a reader of all of it.
pub struct Input {
    /// Up to [`HEAD`] first bytes (fewer only when the input is that short).
    pub head: Vec<u8>,
    rest: Box<dyn Read + Send>,
}

/// How many first bytes [`Input::head`] holds.
pub const HEAD: usize = 16;

impl Input {
    /// The whole input, from its first byte.
    pub fn reader(self) -> impl Read + Send {
        std::io::Cursor::new(self.head).chain(self.rest)
    }
}

/// Open `path` for reading a profile (see the module docs for what is refused and bounded).
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
        bail!("cannot read {shown}: it is a {}, not a profile", kind(&ft));
    };
    let mut rest: Box<dyn Read + Send> = Box::new(Capped {
        r: rest,
        left: budget,
        budget,
        what: shown.to_string(),
    });
    let mut head = vec![0; HEAD];
    let mut n = 0;
    while n < HEAD {
        match rest.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).with_context(|| format!("cannot read {shown}")),
        }
    }
    head.truncate(n);
    Ok(Input { head, rest })
}

/// A reader that fails, instead of ending, past `budget` bytes: a truncated stream would read as a
/// corrupt profile, and the user must learn the real reason.
struct Capped {
    r: Box<dyn Read + Send>,
    left: u64,
    budget: u64,
    what: String,
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
                })),
            };
        }
        let want = buf.len().min(self.left.min(usize::MAX as u64) as usize);
        let n = self.r.read(&mut buf[..want])?;
        self.left -= n as u64;
        Ok(n)
    }
}

fn kind(ft: &std::fs::FileType) -> &'static str {
    if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_socket() {
        "socket"
    } else {
        "block device"
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
