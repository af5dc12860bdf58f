//! The control socket's `ok` reply, parsed once into typed fields: every command that reads a
//! reply (`memlens ctl`, `attach`/`detach`, `serve`, `study`) uses these fields, never the words.
//!
//! The runtime writes (runtime/src/control/ctl_proto.c, jeprof.c, attach.c), after `ok`:
//!
//! ```text
//! start [INTERVAL]       active=1 interval=N was=0|1
//! stop                   active=0 was=0|1
//! dump NAME              dumped NAME
//! reset                  reset
//! status                 pid=N active=0|1 interval=N samples=N alloc_bytes=N stacks=N truncated=N
//!                        dropped=N inuse_bytes=N mmap_inuse_bytes=N dropped_bytes=N max_stacks=N
//!                        table_full=N
//!                        [cost_ns=N cost_calls=N cpu_ns=N]
//! jemalloc status        allocator=none | allocator=jemalloc prof=0|1 [active=0|1 lg_sample=N]
//! jemalloc start LG      active=1 lg_sample=LG
//! jemalloc stop          active=0
//! attach …               attached=1 was=0|1 active=0|1
//! detach                 detached unhooked=N
//! ```
//!
//! A field the request does not answer with is `None`. A known field with a malformed value, or a
//! word that is not `key=value` nor one of the words above, is an error ([`ReplyError`]); a
//! `key=value` this client does not know is skipped, so that the runtime can add facts without
//! breaking older clients.
use std::fmt;

/// An `ok` reply of the control socket, field by field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reply {
    /// Sampling is on (memlens's, or jemalloc's profiler for `jemalloc …`).
    pub active: Option<bool>,
    /// Sampling was on before this `start`/`stop` (the runtime was attached before this `attach`).
    pub was: Option<bool>,
    /// The mean sampling interval in bytes (0: every allocation).
    pub interval: Option<u64>,
    /// The process's pid, in its own pid namespace.
    pub pid: Option<u64>,
    /// Samples taken.
    pub samples: Option<u64>,
    /// Bytes allocated, estimated from the samples.
    pub alloc_bytes: Option<u64>,
    /// Distinct stacks recorded.
    pub stacks: Option<u64>,
    /// Samples whose stack was cut at the depth limit.
    pub truncated: Option<u64>,
    /// Samples dropped (the stack table full, or no memory for it).
    pub dropped: Option<u64>,
    /// Heap bytes in use, estimated from the sampled live blocks (anonymous mmap apart).
    pub inuse_bytes: Option<u64>,
    /// Anonymous mmap bytes in use, estimated from the sampled live mappings (issue 31).
    pub mmap_inuse_bytes: Option<u64>,
    /// Bytes the dropped samples stood for.
    pub dropped_bytes: Option<u64>,
    /// How many stacks the table holds.
    pub max_stacks: Option<u64>,
    /// Samples dropped because the stack table was full.
    pub table_full: Option<u64>,
    /// CPU ns spent in the sampled path so far (runtime/src/sample/cost.c), where it is counted.
    pub cost_ns: Option<u64>,
    /// Allocations while sampling, estimated from the samples.
    pub cost_calls: Option<u64>,
    /// The process's CPU ns so far.
    pub cpu_ns: Option<u64>,
    /// The allocator `jemalloc status` found: `jemalloc` or `none`.
    pub allocator: Option<String>,
    /// jemalloc was started with its profiler (`MALLOC_CONF=prof:true`).
    pub prof: Option<bool>,
    /// jemalloc's sampling interval, as log2 of bytes.
    pub lg_sample: Option<u64>,
    /// The runtime is attached (`attach`).
    pub attached: Option<bool>,
    /// The runtime detached (`detach`).
    pub detached: bool,
    /// Allocation hooks `detach` removed.
    pub unhooked: Option<u64>,
    /// The name of the dump `dump NAME` wrote into the control directory.
    pub dumped: Option<String>,
    /// The counters were zeroed (`reset`).
    pub reset: bool,
}

/// Why a reply could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyError {
    /// A known field whose value is not what the runtime writes.
    BadValue {
        /// The field.
        key: String,
        /// What came instead.
        value: String,
    },
    /// `dumped` without the dump's name.
    MissingName,
    /// A word that is neither `key=value` nor a word of the protocol.
    Unexpected(String),
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplyError::BadValue { key, value } => write!(f, "bad {key} value '{value}'"),
            ReplyError::MissingName => write!(f, "'dumped' without the dump's name"),
            ReplyError::Unexpected(w) => write!(f, "unexpected word '{w}'"),
        }
    }
}

impl std::error::Error for ReplyError {}

impl Reply {
    /// Parse what follows `ok` in a reply line.
    pub fn parse(text: &str) -> Result<Reply, ReplyError> {
        let mut r = Reply::default();
        let mut words = text.split_whitespace();
        while let Some(w) = words.next() {
            match w.split_once('=') {
                Some((key, value)) => r.field(key, value)?,
                None => match w {
                    "dumped" => {
                        let name = words.next().ok_or(ReplyError::MissingName)?;
                        r.dumped = Some(name.to_string());
                    }
                    "reset" => r.reset = true,
                    "detached" => r.detached = true,
                    _ => return Err(ReplyError::Unexpected(w.to_string())),
                },
            }
        }
        Ok(r)
    }

    fn field(&mut self, key: &str, value: &str) -> Result<(), ReplyError> {
        let bad = || ReplyError::BadValue {
            key: key.to_string(),
            value: value.to_string(),
        };
        let num = || value.parse::<u64>().map_err(|_| bad());
        let flag = || match value {
            "0" => Ok(false),
            "1" => Ok(true),
            _ => Err(bad()),
        };
        let slot = match key {
            "active" => return flag().map(|v| self.active = Some(v)),
            "was" => return flag().map(|v| self.was = Some(v)),
            "prof" => return flag().map(|v| self.prof = Some(v)),
            "attached" => return flag().map(|v| self.attached = Some(v)),
            "allocator" if !value.is_empty() => {
                self.allocator = Some(value.to_string());
                return Ok(());
            }
            "allocator" => return Err(bad()),
            "interval" => &mut self.interval,
            "pid" => &mut self.pid,
            "samples" => &mut self.samples,
            "alloc_bytes" => &mut self.alloc_bytes,
            "stacks" => &mut self.stacks,
            "truncated" => &mut self.truncated,
            "dropped" => &mut self.dropped,
            "inuse_bytes" => &mut self.inuse_bytes,
            "mmap_inuse_bytes" => &mut self.mmap_inuse_bytes,
            "dropped_bytes" => &mut self.dropped_bytes,
            "max_stacks" => &mut self.max_stacks,
            "table_full" => &mut self.table_full,
            "cost_ns" => &mut self.cost_ns,
            "cost_calls" => &mut self.cost_calls,
            "cpu_ns" => &mut self.cpu_ns,
            "lg_sample" => &mut self.lg_sample,
            "unhooked" => &mut self.unhooked,
            // A newer runtime's fact: not needed here.
            _ if !key.is_empty()
                && key
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') =>
            {
                return Ok(())
            }
            _ => return Err(ReplyError::Unexpected(format!("{key}={value}"))),
        };
        *slot = Some(num()?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_reads_every_field() {
        let r = Reply::parse(
            "pid=12 active=1 interval=65536 samples=7 alloc_bytes=458752 stacks=3 truncated=1 \
             dropped=2 inuse_bytes=4096 mmap_inuse_bytes=8192 dropped_bytes=8192 max_stacks=65536 table_full=0 \
             cost_ns=900 cost_calls=448 cpu_ns=100000",
        )
        .unwrap();
        assert_eq!(r.pid, Some(12));
        assert_eq!(r.active, Some(true));
        assert_eq!(r.interval, Some(65536));
        assert_eq!(r.samples, Some(7));
        assert_eq!(r.alloc_bytes, Some(458752));
        assert_eq!(r.stacks, Some(3));
        assert_eq!(r.truncated, Some(1));
        assert_eq!(r.mmap_inuse_bytes, Some(8192));
        assert_eq!(r.dropped, Some(2));
        assert_eq!(r.inuse_bytes, Some(4096));
        assert_eq!(r.dropped_bytes, Some(8192));
        assert_eq!(r.max_stacks, Some(65536));
        assert_eq!(r.table_full, Some(0));
        assert_eq!(r.cost_ns, Some(900));
        assert_eq!(r.cost_calls, Some(448));
        assert_eq!(r.cpu_ns, Some(100000));
        assert_eq!(r.was, None);
    }

    #[test]
    fn each_request_s_reply() {
        let r = Reply::parse("active=1 interval=0 was=0").unwrap();
        assert_eq!(
            (r.active, r.interval, r.was),
            (Some(true), Some(0), Some(false))
        );
        let r = Reply::parse("active=0 was=1").unwrap();
        assert_eq!(
            (r.active, r.interval, r.was),
            (Some(false), None, Some(true))
        );
        let r = Reply::parse("dumped 12.dump-1-2-0.raw").unwrap();
        assert_eq!(r.dumped.as_deref(), Some("12.dump-1-2-0.raw"));
        assert!(Reply::parse("reset").unwrap().reset);
        assert_eq!(Reply::parse("").unwrap(), Reply::default());
        let r = Reply::parse("allocator=jemalloc prof=1 active=0 lg_sample=19").unwrap();
        assert_eq!(r.allocator.as_deref(), Some("jemalloc"));
        assert_eq!(
            (r.prof, r.active, r.lg_sample),
            (Some(true), Some(false), Some(19))
        );
        let r = Reply::parse("allocator=none").unwrap();
        assert_eq!((r.allocator.as_deref(), r.prof), (Some("none"), None));
        let r = Reply::parse("attached=1 was=0 active=1").unwrap();
        assert_eq!(
            (r.attached, r.was, r.active),
            (Some(true), Some(false), Some(true))
        );
        let r = Reply::parse("detached unhooked=5").unwrap();
        assert!(r.detached);
        assert_eq!(r.unhooked, Some(5));
    }

    #[test]
    fn malformed_replies_are_errors_and_new_facts_are_skipped() {
        let bad = |t: &str| Reply::parse(t).unwrap_err().to_string();
        assert_eq!(bad("active=2"), "bad active value '2'");
        assert_eq!(bad("samples=-1"), "bad samples value '-1'");
        assert_eq!(bad("interval="), "bad interval value ''");
        assert_eq!(bad("allocator="), "bad allocator value ''");
        assert_eq!(bad("dumped"), "'dumped' without the dump's name");
        assert_eq!(bad("attached"), "unexpected word 'attached'");
        assert_eq!(bad("Samples=1"), "unexpected word 'Samples=1'");
        let r = Reply::parse("samples=3 new_fact=x").unwrap();
        assert_eq!(r.samples, Some(3));
    }
}
