//! `memlens`: the thin binary on top of the memlens crates. It parses the command line, dispatches to
//! the crate that owns each command, and turns errors into one line on stderr with the exit status
//! the conventions define (2: usage, 1: failure).
use clap::{Parser, Subcommand};
use memlens_measure::error::is_usage;
use std::process::ExitCode;

const ABOUT: &str = "memlens: memory-performance toolkit for multithreaded native programs";

const EXAMPLES: &str = "\
Examples:
  memlens run -- ./server --port 8080        profile a program, write memlens.server.<pid>.pb.gz
  memlens report memlens.server.1234.pb.gz   top allocating stacks and functions
  memlens check --max-peak 200M -- ./test    fail a CI job (exit 3) when the heap breaks a limit
  memlens ctl 1234 start                     switch profiling on in a running process
  memlens serve                              pprof endpoints for Pyroscope / Parca to scrape
  memlens attach 1234 --for 30s              profile a process started without memlens
  memlens study                              what profiling costs, by sampling interval
  memlens bench alloc --sizes 128,1K         which allocator scales for a pattern
  memlens bench latency                      latency of each level of the memory hierarchy
  memlens sysinfo                            what this machine is";

#[derive(Parser)]
#[command(name = "memlens", version, about = ABOUT, after_help = EXAMPLES, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a command under the sampling heap profiler and write a pprof profile at exit
    Run(memlens_run::RunArgs),
    /// Control a process running under the memlens runtime (start, stop, dump, reset, status)
    Ctl(memlens_run::CtlArgs),
    /// Serve pprof endpoints of the processes under memlens, for Pyroscope, Parca, go tool pprof
    Serve(memlens_serve::ServeArgs),
    /// Load the sampling profiler into a running process that was started without memlens
    Attach(memlens_attach::AttachArgs),
    /// Stop sampling in an attached process and remove its allocation hooks
    Detach(memlens_attach::DetachArgs),
    /// Show the top allocating stacks and functions of a profile
    Report(memlens_profile::ReportArgs),
    /// What grew between two profiles, per stack and per function
    Diff(memlens_profile::DiffArgs),
    /// Run a program under the heap profiler and judge its heap against limits (exit 3 if broken)
    Check(memlens_check::CheckArgs),
    /// What heap profiling costs, by sampling interval and unwinder, and which interval to use
    Study(Box<memlens_study::StudyArgs>),
    /// Benchmarks: allocator scalability, memory latency, memory bandwidth
    #[command(subcommand)]
    Bench(BenchCmd),
    /// What this machine is: CPU, caches, memory, TSC, counters
    Sysinfo(SysinfoArgs),
    /// Run a built-in workload in this process (used by `memlens study`)
    #[command(hide = true)]
    Workload(memlens_workloads::WorkloadArgs),
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Which allocator scales for a pattern: threads × sizes × patterns, with per-call latency
    Alloc(memlens_bench_alloc::AllocArgs),
    /// Memory access latency by access order, element size and working-set size
    Latency(memlens_bench_mem::LatencyArgs),
    /// STREAM bandwidth and the cost of per-element indirection
    Bandwidth(memlens_bench_mem::BandwidthArgs),
}

/// Print the machine facts every result file carries.
#[derive(clap::Args)]
#[command(after_help = "Example:\n  memlens sysinfo --json machine.json")]
struct SysinfoArgs {
    /// Also write the facts as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<std::path::PathBuf>,
}

fn sysinfo(a: SysinfoArgs) -> anyhow::Result<i32> {
    let s = memlens_measure::sysinfo::collect();
    for (k, v) in s.lines() {
        println!("{k:>24}: {v}");
    }
    if let Some(p) = a.json {
        let json = memlens_render::output::to_json_pretty(&s)?;
        memlens_render::output::write_text(&p, &(json + "\n"))?;
    }
    Ok(0)
}

fn dispatch(cmd: Cmd) -> anyhow::Result<i32> {
    match cmd {
        Cmd::Run(a) => memlens_run::run_run(a),
        Cmd::Ctl(a) => memlens_run::run_ctl(a),
        Cmd::Serve(a) => memlens_serve::run_serve(a),
        Cmd::Attach(a) => memlens_attach::run_attach(a),
        Cmd::Detach(a) => memlens_attach::run_detach(a),
        Cmd::Report(a) if a.file.is_dir() => memlens_run::run_collect(&a.file),
        Cmd::Report(a) => memlens_profile::run_report(a),
        Cmd::Diff(a) => memlens_profile::run_diff(a),
        Cmd::Check(a) => memlens_check::run_check(a),
        Cmd::Study(a) => memlens_study::run_study(*a),
        Cmd::Bench(BenchCmd::Alloc(a)) => memlens_bench_alloc::run_alloc(a),
        Cmd::Bench(BenchCmd::Latency(a)) => memlens_bench_mem::run_latency(a),
        Cmd::Bench(BenchCmd::Bandwidth(a)) => memlens_bench_mem::run_bandwidth(a),
        Cmd::Sysinfo(a) => sysinfo(a),
        Cmd::Workload(a) => memlens_workloads::run_workload(a),
    }
}

/// clap's own messages span several lines; the conventions want one: `memlens: error: …`.
fn one_line_clap_error(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let mut lines = rendered.lines().skip_while(|l| l.trim().is_empty());
    let mut first = lines
        .next()
        .unwrap_or("invalid command line")
        .trim_start_matches("error: ")
        .trim()
        .to_string();
    // "the following required arguments were not provided:" names them on the indented lines
    // below: without them the line says nothing.
    if first.ends_with(':') {
        let named: Vec<&str> = lines
            .take_while(|l| l.starts_with(' ') && !l.trim().is_empty())
            .map(str::trim)
            .collect();
        if !named.is_empty() {
            first = format!("{first} {}", named.join(", "));
        }
    }
    let tip = rendered
        .lines()
        .find(|l| l.contains("try '"))
        .map(|l| l.trim().to_string());
    match tip {
        Some(t) => format!(
            "memlens: error: {first} ({})",
            t.trim_start_matches("For more information, ")
                .trim_end_matches('.')
        ),
        None => format!("memlens: error: {first}"),
    }
}

/// Is this failure a closed output pipe (`memlens report … | head`)? Then the reader has all it
/// wanted: memlens stops quietly, as a filter killed by SIGPIPE would.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// No panic trace ever reaches the user, whatever RUST_BACKTRACE says: `println!` into a closed
/// pipe ends the process quietly, any other panic becomes one `memlens: error:` line (exit 1).
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        if msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let line = format!(
            "memlens: error: internal error{at}: {} (please report this)\n",
            msg.replace('\n', " ")
        );
        use std::io::Write;
        let _ = std::io::stderr().write_all(line.as_bytes());
        std::process::exit(1);
    }));
}

fn main() -> ExitCode {
    install_panic_hook();
    // `ctl`, `dump`, `serve`…: a fork child without its socket yet is made to open one (ptrace).
    memlens_attach::install_socket_opener();
    // The test suite's way to check the hook above with a real panic.
    if std::env::var_os("MEMLENS_DEBUG_PANIC").is_some() {
        panic!("MEMLENS_DEBUG_PANIC is set");
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind::*;
            if matches!(
                e.kind(),
                DisplayHelp | DisplayVersion | DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                return ExitCode::from(if e.kind() == DisplayHelpOnMissingArgumentOrSubcommand {
                    2
                } else {
                    0
                });
            }
            eprintln!("{}", one_line_clap_error(&e));
            return ExitCode::from(2);
        }
    };
    match dispatch(cli.cmd) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` joins the context chain on one line: "cannot read x.pb.gz: No such file…".
            let msg = format!("{e:#}").replace('\n', " ");
            eprintln!("memlens: error: {msg}");
            ExitCode::from(if is_usage(&e) { 2 } else { 1 })
        }
    }
}
