//! Which files of a run directory belong to the run.
//!
//! Root's run directory is mode 1733: a child that dropped its privileges must be able to create
//! its files there, and so can any other local user — who could plant a dump naming `/dev/zero`,
//! a FIFO named like a dump, or a dump for a pid of their choosing. So a file is collected only
//! when it is a regular file (not a link, a FIFO, a device) named like a run's file
//! (`d.<pid>.<seq>.raw`, `<pid>.<n>.state`), and
//!
//! * it is owned by the run's own user (who ran `memlens run`), or
//! * it is named after one of the run's pids and owned by one of the run's users.
//!
//! The run's pids: the program, every process memlens reaped (only descendants are reparented to
//! it), those it left running, those alive below it, every pid with a state file of the run's own
//! user (the runtime creates a process's state file before the process can drop privileges: at
//! start, and in a fork child before it runs), and every pid whose state file (of a run's user)
//! names a run's pid as its parent. The run's users: the run's own, whoever wrote the final dump a
//! trusted state file names (a child that dropped its privileges wrote it), the owner of a later
//! image's state file of a trusted process (same pid, same start time: it exec'd after dropping
//! them), and the owners of the run's live processes. Both grow together until nothing changes.
//!
//! (Another user who learns the run directory's name — 32 random bits, in the environment of the
//! run's processes — and a run process's start time could still forge that last link; what such
//! a file can make memlens do is bounded anyway: every file here is read as a regular file of
//! bounded size.)
use crate::rundir::{Plan, RunDir, DUMP_STEM};
use memlens_profile::{StateInfo, StateStatus};
use memlens_target::{raw_dumps, Dump};
use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// A state file of the run.
pub(crate) struct StateFile {
    /// Its pid and image number.
    pub pid: u32,
    pub n: u64,
    pub path: PathBuf,
    /// Its header (`Err`: why it cannot be read).
    pub info: Result<StateInfo, String>,
    uid: u32,
}

/// The run's files, and how many others were left alone.
pub(crate) struct RunFiles {
    /// State files, by pid then image.
    pub states: Vec<StateFile>,
    /// Raw dumps, by pid then sequence number.
    pub dumps: Vec<Dump>,
}

/// The files of the run in `dir`; the others are named in one warning line.
pub(crate) fn run_files(dir: &RunDir, plan: &Plan, live: &[u32]) -> anyhow::Result<RunFiles> {
    let states = state_files(dir);
    let dumps = raw_dumps(&dir.path.join(DUMP_STEM))?;
    let mut users = BTreeSet::from([dir.owner]);
    let mut pids: BTreeSet<u32> = [plan.main_pid]
        .into_iter()
        .chain(plan.ended.keys().copied())
        .chain(plan.running.iter().copied())
        .chain(live.iter().copied())
        .collect();
    let mut trusted: Vec<bool> = states.iter().map(|s| s.uid == dir.owner).collect();
    pids.extend(states.iter().filter(|s| s.uid == dir.owner).map(|s| s.pid));
    while grow(&states, &dumps, &mut trusted, &mut users, &mut pids) {}
    let ours =
        |pid: u32, uid: u32| uid == dir.owner || (users.contains(&uid) && pids.contains(&pid));
    let mut ignored: Vec<(String, u32)> = Vec::new();
    let mut keep = |pid: u32, uid: u32, path: &std::path::Path| {
        let ok = ours(pid, uid);
        if !ok {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            ignored.push((name.into_owned(), uid));
        }
        ok
    };
    let states: Vec<StateFile> = states
        .into_iter()
        .filter(|s| keep(s.pid, s.uid, &s.path))
        .collect();
    let dumps: Vec<Dump> = dumps
        .into_iter()
        .filter(|d| keep(d.pid, d.uid, &d.path))
        .collect();
    if !ignored.is_empty() {
        say_ignored(dir, &ignored);
    }
    Ok(RunFiles { states, dumps })
}

/// One round of growing the run's users and pids from its state files and dumps; true when
/// something was added.
fn grow(
    states: &[StateFile],
    dumps: &[Dump],
    trusted: &mut [bool],
    users: &mut BTreeSet<u32>,
    pids: &mut BTreeSet<u32>,
) -> bool {
    let count = |t: &[bool]| t.iter().filter(|&&t| t).count();
    let before = (users.len(), pids.len(), count(trusted));
    for (i, s) in states.iter().enumerate() {
        let Ok(info) = &s.info else { continue };
        if info.pid != s.pid {
            continue;
        }
        // a later image of a trusted process: same pid, same start time
        let same_process = states.iter().zip(trusted.iter()).any(|(t, &ok)| {
            ok && t.pid == s.pid
                && t.info
                    .as_ref()
                    .is_ok_and(|ti| ti.start_ticks == info.start_ticks)
        });
        if !trusted[i] && same_process {
            users.insert(s.uid);
        }
        if !trusted[i] && users.contains(&s.uid) && (same_process || pids.contains(&info.ppid)) {
            trusted[i] = true;
            pids.insert(s.pid);
        }
        if let (true, StateStatus::Dumped(seq)) = (trusted[i], info.status) {
            let writer = dumps.iter().find(|d| d.pid == s.pid && d.seq == seq);
            users.extend(writer.map(|d| d.uid));
        }
    }
    users.extend(pids.iter().filter_map(|&p| live_uid(p)));
    before != (users.len(), pids.len(), count(trusted))
}

/// One line for the files that are not the run's.
fn say_ignored(dir: &RunDir, ignored: &[(String, u32)]) {
    let owners: BTreeSet<u32> = ignored.iter().map(|(_, u)| *u).collect();
    let owners: Vec<String> = owners.iter().map(u32::to_string).collect();
    let names: Vec<&str> = ignored.iter().take(5).map(|(n, _)| n.as_str()).collect();
    let more = if ignored.len() > 5 { ", …" } else { "" };
    eprintln!(
        "memlens: warning: ignored {} file{} in {} that the run's processes did not write \
         (owned by uid {}: {}{more})",
        ignored.len(),
        if ignored.len() == 1 { "" } else { "s" },
        dir.path.display(),
        owners.join(", "),
        names.join(", ")
    );
}

/// The effective uid of `pid`, when it is alive.
fn live_uid(pid: u32) -> Option<u32> {
    memlens_target::ProcStatus::read(pid as i32).ok()??.uid()
}

/// The state files in the run directory (`<pid>.<n>.state`, regular files only), by pid then
/// image, with their headers.
fn state_files(dir: &RunDir) -> Vec<StateFile> {
    let Ok(rd) = std::fs::read_dir(&dir.path) else {
        return Vec::new();
    };
    let mut v: Vec<StateFile> = rd
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let (pid, n) = name.strip_suffix(".state")?.split_once('.')?;
            let (pid, n) = (pid.parse().ok()?, n.parse().ok()?);
            let meta = std::fs::symlink_metadata(e.path()).ok()?;
            if !meta.is_file() {
                return None;
            }
            let info = memlens_profile::read_state_info(&e.path()).map_err(|e| format!("{e:#}"));
            Some(StateFile {
                pid,
                n,
                path: e.path(),
                info,
                uid: meta.uid(),
            })
        })
        .collect();
    v.sort_by_key(|s| (s.pid, s.n));
    v
}
