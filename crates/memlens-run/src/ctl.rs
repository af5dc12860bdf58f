//! `memlens ctl PID …`: one request to the control socket of a process running under the runtime
//! (the client is [`memlens_target::Target`]), its reply printed for a person.
use anyhow::{Context, Result};
use memlens_measure::units::format_size;
use memlens_target::{default_dump_name, parse_pid, Reply, Target};
use std::path::{Path, PathBuf};

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
    pub(crate) pid: String,
    #[command(subcommand)]
    /// What to do.
    pub(crate) action: CtlAction,
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
            let iv = interval
                .as_deref()
                .map(|s| memlens_target::parse_interval(s, "--interval"))
                .transpose()?;
            let r = t.start(iv)?;
            let was = if r.was == Some(true) {
                " (it was already on)"
            } else {
                ""
            };
            let iv = r.interval.map(format_size).unwrap_or_else(|| "?".into());
            println!(
                "process {} ({}): sampling started, interval {iv}{was}",
                t.pid, t.comm
            );
        }
        CtlAction::Stop => {
            let r = t.stop()?;
            let was = if r.was == Some(false) {
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
                for w in &s.warnings {
                    eprintln!("memlens: warning: {w}");
                }
                println!(
                    "process {} ({}): profile written to {} ({} samples, {} stacks, {} allocated, {} live)",
                    t.pid,
                    t.comm,
                    out.display(),
                    s.samples,
                    s.stacks,
                    memlens_measure::units::format_bytes(s.alloc_bytes),
                    memlens_measure::units::format_bytes(s.inuse_bytes)
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
    let n = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "n/a".into());
    let samples = r.samples.unwrap_or(0);
    let truncated = r.truncated.unwrap_or(0);
    let share = if samples > 0 {
        format!(
            "{:.1}% of samples",
            100.0 * truncated as f64 / samples as f64
        )
    } else {
        "no samples yet".into()
    };
    let state = if r.active == Some(true) {
        "active"
    } else {
        "inactive"
    };
    let iv = match r.interval {
        Some(0) => "exact (every allocation)".to_string(),
        Some(v) => format!("{} ({v} bytes)", format_size(v)),
        None => "n/a".into(),
    };
    println!("process {} ({})", t.pid, t.comm);
    println!("  sampling       {state}");
    println!("  interval       {iv}");
    println!("  samples        {}", n(r.samples));
    let bytes = r
        .alloc_bytes
        .map(format_size)
        .unwrap_or_else(|| "n/a".into());
    println!("  allocated      {bytes} (estimated from the samples)");
    let limit = r
        .max_stacks
        .map_or(String::new(), |m| format!(" (table holds {m})"));
    println!("  stacks         {}{limit}", n(r.stacks));
    println!("  truncated      {} ({share})", n(r.truncated));
    let dropped_bytes = match r.dropped_bytes {
        Some(b) if b > 0 => format!(" ({} not in the profile)", format_size(b)),
        _ => String::new(),
    };
    let full = match r.table_full {
        Some(f) if f > 0 => format!("; {f} because the stack table was full (raise --max-stacks)"),
        _ => String::new(),
    };
    println!("  dropped        {}{dropped_bytes}{full}", n(r.dropped));
    // the runtime's own account of what profiling has cost so far (runtime/src/sample/cost.c)
    if let (Some(ns), Some(cpu)) = (r.cost_ns, r.cpu_ns) {
        let share = if cpu > 0 {
            format!("{:.2}%", ns as f64 / cpu as f64 * 100.0)
        } else {
            "n/a".into()
        };
        println!(
            "  profiler cost  {:.6} s CPU in its sampled path, {share} of the process's {:.3} s",
            ns as f64 / 1e9,
            cpu as f64 / 1e9,
        );
        println!(
            "  calls          {} allocations while sampling (estimated from the samples)",
            n(r.cost_calls)
        );
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
