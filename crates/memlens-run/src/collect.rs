//! Collecting a run: every process that ran under the runtime gets its profile, or a line saying
//! where it will be (still running) or why there is none. Used by `memlens run` when its program
//! has ended and by `memlens report RUNDIR` later (for daemons that outlived `memlens run`).
use crate::members::{run_files, RunFiles, StateFile};
use crate::rundir::{Plan, RunDir, DUMP_STEM};
use anyhow::{Context, Result};
use memlens_profile::{Links, StateStatus};
use memlens_target::Dump;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The profile of `pid` (of its image `seq`, when it is not the last): `main_out` for the main
/// process, `<stem>.<pid>[.<seq>].pb.gz` beside it for the others.
fn profile_path(main_out: &Path, main_pid: u32, pid: u32, seq: Option<u64>) -> PathBuf {
    let stem = memlens_profile::profile_stem(main_out);
    let stem = stem.file_name().unwrap_or_default().to_string_lossy();
    let dir = main_out.parent().map(Path::to_path_buf).unwrap_or_default();
    match seq {
        None if pid == main_pid => main_out.to_path_buf(),
        None => dir.join(format!("{stem}.{pid}.pb.gz")),
        Some(s) => dir.join(format!("{stem}.{pid}.{s}.pb.gz")),
    }
}

/// Convert one raw dump (a file, or `text` rendered from a state file) to gzipped pprof (the
/// profile crate does the work); a one-line summary.
fn convert(raw: &Path, text: Option<&String>, out: &Path) -> Result<String> {
    let t0 = std::time::Instant::now();
    let s = match text {
        Some(t) => memlens_profile::convert_raw_text(t, out)?,
        None => memlens_profile::convert_raw(raw, out)?,
    };
    let took = t0.elapsed().as_secs_f64();
    let full = if s.table_full > 0 {
        format!(
            "; {} samples dropped: the stack table was full at {} stacks (raise --max-stacks)",
            s.table_full, s.max_stacks
        )
    } else {
        String::new()
    };
    let full = if s.untracked > 0 {
        format!(
            "{full}; {} samples not tracked live (the address-space limit stopped the sampled-blocks \
             range: in-use figures leave them out)",
            s.untracked
        )
    } else {
        full
    };
    Ok(format!(
        "{} samples, {} stacks, {:.1}% truncated, {} allocated, {} in use{full}; converted in {took:.2} s",
        s.samples,
        s.stacks,
        s.truncated_share * 100.0,
        memlens_measure::units::format_bytes(s.alloc_bytes.max(0.0)),
        memlens_measure::units::format_bytes(s.inuse_bytes.max(0.0)),
    ))
}

/// Is this (non-main) dump worth a profile of its own? Not when the image recorded nothing, nor when
/// it is the image a forked child replaced by exec without a sample of its own: what it held was
/// inherited from its parent (already in the parent's profile) and the exec discards it. Only its
/// header is read ([`memlens_profile::read_raw_head`]); a dump that cannot be read is worth the
/// attempt (the conversion says what is wrong with it).
pub(crate) fn worth_a_profile(raw: &Path) -> bool {
    match memlens_profile::read_raw_head(raw) {
        Ok(h) => h.has_stacks && (h.meta.samples != 0 || h.meta.reason != "exec"),
        Err(_) => true,
    }
}

/// How a process ended, from its raw wait status: `exit 3`, `SIGKILL`, `SIGSEGV (core dumped)`.
pub fn ending(status: i32) -> String {
    if libc::WIFEXITED(status) {
        format!("exit {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        let core = if libc::WCOREDUMP(status) {
            " (core dumped)"
        } else {
            ""
        };
        format!("{}{core}", signal_name(libc::WTERMSIG(status)))
    } else {
        format!("status {status:#x}")
    }
}

/// `SIGKILL` for 9.
pub fn signal_name(sig: i32) -> String {
    let n = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {sig}"),
    };
    n.to_string()
}

/// A process of the run, as far as its files and `memlens run` know it.
#[derive(Debug, Default)]
struct Proc {
    /// Its text dumps, in order (exec, exit).
    dumps: Vec<Dump>,
    /// How it ended, when memlens reaped it.
    ended: Option<i32>,
    /// It is still running.
    alive: bool,
}

/// The command name of a live process.
fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// Is `pid` running (not a zombie)?
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        let st = s.rsplit(')').next().unwrap_or("").trim_start();
        !st.starts_with('Z') && !st.starts_with('X')
    })
}

/// Where a collection's lines go: to stderr as they come (`memlens run`, `memlens report
/// RUNDIR`), or kept for the caller to show as it sees fit (`memlens check`, whose success is one
/// line).
#[derive(Debug, Default)]
pub struct Notes {
    keep: bool,
    /// The lines kept (when keeping).
    pub lines: Vec<String>,
}

impl Notes {
    /// Lines go to stderr.
    pub fn stderr() -> Notes {
        Notes::default()
    }

    /// Lines are kept in [`Notes::lines`].
    pub fn kept() -> Notes {
        Notes {
            keep: true,
            lines: Vec::new(),
        }
    }

    fn say(&mut self, line: String) {
        if self.keep {
            self.lines.push(line);
        } else {
            eprintln!("{line}");
        }
    }
}

/// What a collection found.
pub struct Collected {
    /// Profiles written.
    pub written: usize,
    /// Each profile written: the process and the file (an image replaced by exec has its own).
    pub profiles: Vec<(u32, PathBuf)>,
    /// Processes of the run still running (their profiles are collected later).
    pub running: Vec<u32>,
}

/// `/proc/PID/stat`'s starttime of a running (not zombie) process.
fn start_ticks(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = s.rsplit(')').next()?;
    let mut f = rest.split_whitespace();
    let state = f.next()?;
    if state.starts_with('Z') || state.starts_with('X') {
        return None;
    }
    // starttime is field 22; `state` was field 3
    f.nth(18)?.parse().ok()
}

/// What the state files say, before the dumps are converted.
#[derive(Default)]
struct FromStates {
    /// Pids whose current image is running.
    running: Vec<u32>,
    /// Dumps that are their image's last word (its state file is removed with them).
    done: BTreeMap<PathBuf, PathBuf>,
    /// Dumps rendered from a state file, and how the process ended.
    recovered: BTreeMap<PathBuf, String>,
    /// Their text (rendered in memory: the run directory may be full).
    texts: BTreeMap<PathBuf, String>,
}

/// Dumps rendered from state files get sequence numbers past any the runtime writes.
const RECOVERED_SEQ: u64 = 1_000_000;

/// Read every state file: an image whose final dump was written is paired with it; an image that
/// was replaced by exec with nothing of its own is dropped; the running one is named; any other
/// ended without its dump (killed, exit_group, a dump it could not write) and is rendered into a
/// dump from its state file.
fn read_states(dir: &RunDir, plan: &Plan, files: &[StateFile], notes: &mut Notes) -> FromStates {
    let mut r = FromStates::default();
    for (i, f) in files.iter().enumerate() {
        let (pid, n, path) = (&f.pid, &f.n, &f.path);
        let last = files.get(i + 1).is_none_or(|next| next.pid != *pid);
        let info = match &f.info {
            Ok(info) => info,
            Err(e) => {
                notes.say(format!("memlens: warning: {e}"));
                continue;
            }
        };
        let dump = |seq: u64| {
            dir.dump_prefix()
                .with_file_name(format!("{DUMP_STEM}.{pid}.{seq}.raw"))
        };
        let alive = last && start_ticks(*pid) == Some(info.start_ticks);
        match info.status {
            StateStatus::Dumped(seq) if memlens_profile::raw_is_complete(&dump(seq)) => {
                r.done.insert(dump(seq), path.clone());
                continue;
            }
            _ if alive => {
                r.running.push(*pid);
                continue;
            }
            StateStatus::Nothing => {
                std::fs::remove_file(path).ok();
                continue;
            }
            _ => {}
        }
        let how = match plan.ended.get(pid) {
            Some(&st) if last && libc::WIFSIGNALED(st) => format!("it ended by {}", ending(st)),
            Some(&st) if last => format!("it ended ({}) without its exit dump", ending(st)),
            _ => "it ended without its exit dump".to_string(),
        };
        let reason = match plan.ended.get(pid) {
            Some(&st) if last && libc::WIFSIGNALED(st) => "killed",
            _ => "ended",
        };
        let out = dump(RECOVERED_SEQ + n);
        match memlens_profile::render_state(path, reason, None) {
            Ok(text) => {
                r.done.insert(out.clone(), path.clone());
                r.recovered.insert(out.clone(), how);
                r.texts.insert(out, text);
            }
            Err(e) => notes.say(format!(
                "memlens: warning: cannot read the state of pid {pid} ({}): {e:#}",
                path.display()
            )),
        }
    }
    r
}

/// Collect the run in `dir`: write the profile of every process that has ended, name those still
/// running (`live`: pids known to belong to the run and alive), and say why a process has none.
/// A dump that cannot be converted is a warning. Converted files are removed from the directory.
/// `first`: memlens run's own collection (the program itself is said to have no profile if it
/// has none); a later one (`memlens report RUNDIR`) speaks only of what is left.
pub fn collect(
    dir: &RunDir,
    plan: &Plan,
    live: &[u32],
    first: bool,
    notes: &mut Notes,
) -> Result<Collected> {
    let files = run_files(dir, plan, live)?;
    let states = read_states(dir, plan, &files.states, notes);
    let dumps = the_dumps(dir, plan, files, &states)?;
    let mut procs: BTreeMap<u32, Proc> = BTreeMap::new();
    for d in dumps {
        procs.entry(d.pid).or_default().dumps.push(d);
    }
    for (&pid, &st) in &plan.ended {
        procs.entry(pid).or_default().ended = Some(st);
    }
    for &pid in live.iter().chain(&states.running) {
        procs.entry(pid).or_default().alive = true;
    }
    if first {
        procs.entry(plan.main_pid).or_default();
    }

    let mut c = Collected {
        written: 0,
        profiles: Vec::new(),
        running: Vec::new(),
    };
    let mut nothing: Vec<u32> = Vec::new();
    let mut cut_short: Vec<u32> = Vec::new();
    for (&pid, p) in &procs {
        let main = pid == plan.main_pid;
        let mut empty_image = false;
        let written_before = c.written;
        for (i, d) in p.dumps.iter().enumerate() {
            // The last dump names the process's profile once it has ended; a dump paired with its
            // image's state file is that image's last word even while the process runs on (exec).
            let last = i + 1 == p.dumps.len() && !p.alive;
            let image_done = !p.alive || i + 1 < p.dumps.len() || states.done.contains_key(&d.path);
            if !image_done {
                continue;
            }
            let out = profile_path(&plan.output, plan.main_pid, pid, (!last).then_some(d.seq));
            let forget = |d: &Dump| {
                std::fs::remove_file(&d.path).ok();
                if let Some(state) = states.done.get(&d.path) {
                    std::fs::remove_file(state).ok();
                }
            };
            // An image that allocated nothing worth a sample (typically a forked child that exec'd
            // at once) leaves an empty dump; only the main program's profile is written even when
            // empty.
            let keep_empty = main && last;
            if !states.texts.contains_key(&d.path) && !memlens_profile::raw_is_complete(&d.path) {
                cut_short.push(pid);
                forget(d);
                continue;
            }
            if !keep_empty && !worth_a_profile(&d.path) {
                empty_image = true;
                forget(d);
                continue;
            }
            match convert(&d.path, states.texts.get(&d.path), &out) {
                Ok(summary) => {
                    let how = match (states.recovered.get(&d.path), p.ended) {
                        (Some(how), _) => format!("; {how}: read from its state file"),
                        (None, Some(st)) if last && libc::WIFSIGNALED(st) => {
                            format!("; it ended by {}", ending(st))
                        }
                        _ => String::new(),
                    };
                    notes.say(format!(
                        "memlens: profile of pid {pid} written to {} ({summary}){how}",
                        out.display()
                    ));
                    c.written += 1;
                    c.profiles.push((pid, out.clone()));
                    forget(d);
                }
                Err(e) => notes.say(format!(
                    "memlens: warning: cannot convert the dump of pid {pid}: {e:#}"
                )),
            }
        }
        if empty_image && c.written == written_before && !p.alive {
            nothing.push(pid);
        }
        if !p.alive {
            memlens_target::remove_stale_sockets(&memlens_target::ctl_dir(), pid);
        }
        if p.alive {
            c.running.push(pid);
        }
        name_the_rest(dir, plan, pid, p, notes);
    }
    say_missing(dir, &nothing, &cut_short, notes);
    Ok(c)
}

/// The run's dumps to convert, by pid then sequence: those the runtime wrote, and those rendered
/// from state files (in memory); a copy of each in `--keep-raw`'s directory.
fn the_dumps(dir: &RunDir, plan: &Plan, files: RunFiles, states: &FromStates) -> Result<Vec<Dump>> {
    let mut dumps = files.dumps;
    for out in states.recovered.keys() {
        let name = out.file_name().unwrap_or_default().to_string_lossy();
        let mut parts = name.splitn(4, '.').skip(1);
        if let (Some(Ok(pid)), Some(Ok(seq))) =
            (parts.next().map(str::parse), parts.next().map(str::parse))
        {
            dumps.push(Dump {
                path: out.clone(),
                pid,
                seq,
                uid: dir.owner,
            });
        }
    }
    dumps.sort_by_key(|d| (d.pid, d.seq));
    // A dump the runtime could not finish (its filesystem full) is no profile; the process's state
    // file, rendered above, is.
    dumps.retain(|d| {
        let keep = states.texts.contains_key(&d.path)
            || memlens_profile::raw_is_complete(&d.path)
            || !files.states.iter().any(|s| s.pid == d.pid);
        if !keep {
            std::fs::remove_file(&d.path).ok();
        }
        keep
    });
    if let Some(k) = &plan.keep_raw {
        std::fs::create_dir_all(k).with_context(|| format!("cannot create {}", k.display()))?;
        for d in &dumps {
            let dest = k.join(d.path.file_name().unwrap_or_default());
            match states.texts.get(&d.path) {
                Some(t) => std::fs::write(&dest, t)
                    .with_context(|| format!("cannot write {}", dest.display()))?,
                None => memlens_profile::copy_regular(&d.path, Links::Refuse, &dest)?,
            }
        }
    }
    Ok(dumps)
}

/// A process still running is named with where its profile will go; one that ended without a
/// dump is said to have no profile, and why.
fn name_the_rest(dir: &RunDir, plan: &Plan, pid: u32, p: &Proc, notes: &mut Notes) {
    let main = pid == plan.main_pid;
    if p.alive {
        notes.say(format!(
            "memlens: pid {pid} ({}) is still running; once it has ended, memlens report {} writes its profile to {}",
            comm(pid),
            dir.path.display(),
            profile_path(&plan.output, plan.main_pid, pid, None).display()
        ));
    } else if p.dumps.is_empty() {
        let why = match p.ended {
            Some(st) if libc::WIFSIGNALED(st) => {
                format!(
                    "it ended by {} and the runtime was not in it (statically linked, \
                         a setuid program, or LD_PRELOAD cleared)",
                    ending(st)
                )
            }
            _ => "the runtime was not in it (statically linked, a setuid program, or it \
                  cleared LD_PRELOAD)"
                .to_string(),
        };
        if main || p.ended.is_some() {
            notes.say(format!(
                "memlens: warning: pid {pid} left no profile: {why}"
            ));
        }
    }
}

/// One line for the processes that sampled nothing, one for those whose dump was cut short.
fn say_missing(dir: &RunDir, nothing: &[u32], cut_short: &[u32], notes: &mut Notes) {
    if !nothing.is_empty() {
        notes.say(format!(
            "memlens: no profile for {} process{} that sampled nothing of {} own (pid {})",
            nothing.len(),
            if nothing.len() == 1 { "" } else { "es" },
            if nothing.len() == 1 { "its" } else { "their" },
            pid_list(nothing)
        ));
    }
    if !cut_short.is_empty() {
        let free = crate::places::free_bytes(&dir.path)
            .map(|b| {
                format!(
                    " (its filesystem has {} free)",
                    memlens_measure::units::format_bytes(b as f64)
                )
            })
            .unwrap_or_default();
        notes.say(format!(
            "memlens: warning: no profile for pid {}: {} dump was cut short in {}{free}",
            pid_list(cut_short),
            if cut_short.len() == 1 { "its" } else { "their" },
            dir.path.display()
        ));
    }
}

/// `1, 2, 3` (the first ten, and how many more).
fn pid_list(pids: &[u32]) -> String {
    let shown: Vec<String> = pids.iter().take(10).map(u32::to_string).collect();
    let more = if pids.len() > 10 {
        format!(" and {} more", pids.len() - 10)
    } else {
        String::new()
    };
    format!("{}{more}", shown.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dump(reason: &str, samples: u64, stack: bool) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        let mut t = format!(
            "memlens-raw 1\npid 7\nexe /bin/x\ninterval 65536\nreason {reason}\nsamples {samples}\n"
        );
        if stack {
            t.push_str("stack 0 0 0 65536 4096 0 0x1234\n");
        }
        t.push_str("end\n");
        std::fs::write(f.path(), t).unwrap();
        f
    }

    #[test]
    fn which_dumps_get_a_profile() {
        // The pre-exec image of a forked child: only inherited live blocks, nothing sampled.
        assert!(!worth_a_profile(dump("exec", 0, true).path()));
        assert!(worth_a_profile(dump("exec", 3, true).path()));
        // A forked child that exits without exec keeps its inherited blocks in its own profile.
        assert!(worth_a_profile(dump("fork-child-exit", 0, true).path()));
        assert!(!worth_a_profile(dump("exit", 0, false).path()));
        // One the conversion must judge: unreadable, or not a dump at all.
        let odd = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(odd.path(), "memlens-raw 1\npid x\n").unwrap();
        assert!(worth_a_profile(odd.path()));
        assert!(worth_a_profile(Path::new("/nonexistent/memlens.1.0.raw")));
    }

    #[test]
    fn endings() {
        assert_eq!(ending(3 << 8), "exit 3");
        assert_eq!(ending(9), "SIGKILL");
        assert_eq!(ending(11 | 0x80), "SIGSEGV (core dumped)");
    }

    #[test]
    fn profile_names() {
        let out = Path::new("/o/app.pb.gz");
        assert_eq!(profile_path(out, 5, 5, None), PathBuf::from("/o/app.pb.gz"));
        assert_eq!(
            profile_path(out, 5, 6, None),
            PathBuf::from("/o/app.6.pb.gz")
        );
        assert_eq!(
            profile_path(out, 5, 5, Some(0)),
            PathBuf::from("/o/app.5.0.pb.gz")
        );
    }
}
