//! The run directory: where every process of one `memlens run` leaves what its profile is made of,
//! and where `memlens run` (at the end) or `memlens report RUNDIR` (later, for daemons that outlived
//! it) find it. Layout (docs/survival.md):
//!
//! ```text
//! <root>/                      /dev/shm/memlens-<uid> (tmpfs), else $TMPDIR/memlens-runs-<uid>
//!                              (`places.rs` says which, and why); 0700, or 0711 for root (see
//!                              below); MEMLENS_RUN_ROOT overrides
//!   lib-<hash>/$LIB/libmemlens.so  root's runtime (or anyone's whose cache cannot be used), where
//!                              a child that dropped its privileges and exec'd can still load it
//!                              (a build per C library: `memlens_native::preload_layout`)
//!   <name>.<pid>.<rand>/       one run: 0700, or 1733 for root (a child running as another user
//!                              may create its files, but not list, read or remove anyone's)
//!     run                      the plan, written by memlens run: main pid, output, ended pids
//!     d.<pid>.<seq>.raw        the runtime's text dumps (exit, exec)
//! ```
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Name of the plan file in a run directory.
const PLAN: &str = "run";
/// The runtime's dump prefix inside a run directory (`MEMLENS_OUT=<dir>/d`).
pub const DUMP_STEM: &str = "d";

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// A run directory.
#[derive(Debug, Clone)]
pub struct RunDir {
    /// Where it is.
    pub path: PathBuf,
    /// The run's own user: who ran `memlens run` (the owner of its plan).
    pub owner: u32,
}

/// What `memlens run` recorded about a run, for whoever collects it.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The program memlens started.
    pub main_pid: u32,
    /// Where the main process's profile goes (the others go beside it).
    pub output: PathBuf,
    /// `--keep-raw DIR`.
    pub keep_raw: Option<PathBuf>,
    /// How the processes memlens reaped ended (raw wait status), by pid.
    pub ended: BTreeMap<u32, i32>,
    /// Processes of the run still running when memlens run returned.
    pub running: Vec<u32>,
}

impl RunDir {
    /// A new run directory for a program called `name` in `root` (`Places::find`).
    pub fn create(root: &Path, name: &str) -> Result<RunDir> {
        let name: String = name
            .chars()
            .take(32)
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let me = euid();
        let mode = if me == 0 { 0o1733 } else { 0o700 };
        for _ in 0..100 {
            let path = root.join(format!("{name}.{}.{:08x}", std::process::id(), random()));
            match fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    fs::set_permissions(&path, fs::Permissions::from_mode(mode))
                        .with_context(|| format!("cannot set the mode of {}", path.display()))?;
                    return Ok(RunDir { path, owner: me });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot create {}", path.display()))
                }
            }
        }
        bail!("cannot create a run directory in {}", root.display())
    }

    /// An existing run directory (`memlens report RUNDIR`): its plan must be a regular file (not
    /// a link), and its owner is the run's own user.
    pub fn open(path: &Path) -> Result<RunDir> {
        let Ok(m) = fs::symlink_metadata(path.join(PLAN)) else {
            bail!(
                "{} is not a memlens run directory (no '{PLAN}' file in it)",
                path.display()
            );
        };
        if !m.is_file() {
            bail!(
                "{} is not a memlens run directory (its '{PLAN}' is not a regular file)",
                path.display()
            );
        }
        Ok(RunDir {
            path: path.to_path_buf(),
            owner: m.uid(),
        })
    }

    /// `MEMLENS_OUT` for the runtime.
    pub fn dump_prefix(&self) -> PathBuf {
        self.path.join(DUMP_STEM)
    }

    /// Record the plan (rewritten whole, atomically, whenever it changes).
    pub fn write_plan(&self, p: &Plan) -> Result<()> {
        let mut t = format!(
            "memlens-run 1\nmain_pid {}\noutput {}\n",
            p.main_pid,
            p.output.display()
        );
        if let Some(k) = &p.keep_raw {
            t.push_str(&format!("keep_raw {}\n", k.display()));
        }
        for (pid, st) in &p.ended {
            t.push_str(&format!("ended {pid} {st}\n"));
        }
        for pid in &p.running {
            t.push_str(&format!("running {pid}\n"));
        }
        // A new name, created with O_EXCL (no link followed: others may create files here).
        let tmp = self
            .path
            .join(format!(".{PLAN}.{}.{:08x}", std::process::id(), random()));
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        f.write_all(t.as_bytes())?;
        drop(f);
        fs::rename(&tmp, self.path.join(PLAN))
            .with_context(|| format!("cannot write {}", self.path.join(PLAN).display()))
    }

    /// Read the plan back (a regular file of the run's own user, at most 1 MiB).
    pub fn read_plan(&self) -> Result<Plan> {
        let f = self.path.join(PLAN);
        let (file, m) = memlens_profile::open_regular(&f, memlens_profile::Links::Refuse)?;
        if m.uid() != self.owner {
            bail!(
                "{} belongs to uid {}, not to the run's",
                f.display(),
                m.uid()
            );
        }
        let mut t = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(file, 1 << 20), &mut t)
            .with_context(|| format!("cannot read {}", f.display()))?;
        let t = String::from_utf8_lossy(&t);
        let mut p = Plan::default();
        for l in t.lines() {
            let (k, v) = l.split_once(' ').unwrap_or((l, ""));
            match k {
                "main_pid" => p.main_pid = v.parse().unwrap_or(0),
                "output" => p.output = PathBuf::from(v),
                "keep_raw" => p.keep_raw = Some(PathBuf::from(v)),
                "running" => p.running.extend(v.parse::<u32>().ok()),
                "ended" => {
                    if let Some((pid, st)) = v.split_once(' ') {
                        if let (Ok(pid), Ok(st)) = (pid.parse(), st.parse()) {
                            p.ended.insert(pid, st);
                        }
                    }
                }
                _ => {}
            }
        }
        if p.main_pid == 0 || p.output.as_os_str().is_empty() {
            bail!("{} is incomplete", f.display());
        }
        Ok(p)
    }

    /// Remove the directory and what is left in it.
    pub fn remove(&self) {
        fs::remove_dir_all(&self.path).ok();
    }
}

/// 32 random bits (not for secrets: the directory's mode keeps others out).
fn random() -> u32 {
    let mut b = [0u8; 4];
    if fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .is_err()
    {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        return t ^ std::process::id();
    }
    u32::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_round_trip() {
        let d = tempfile::tempdir().unwrap();
        let r = RunDir {
            path: d.path().to_path_buf(),
            owner: euid(),
        };
        let mut p = Plan {
            main_pid: 12,
            output: PathBuf::from("/x/memlens.a b.12.pb.gz"),
            keep_raw: None,
            ended: BTreeMap::new(),
            running: vec![15],
        };
        p.ended.insert(12, 9);
        p.ended.insert(14, 0);
        r.write_plan(&p).unwrap();
        let q = RunDir::open(d.path()).unwrap().read_plan().unwrap();
        assert_eq!(q.main_pid, 12);
        assert_eq!(q.output, p.output);
        assert_eq!(q.ended, p.ended);
        assert_eq!(q.running, p.running);
        assert!(RunDir::open(&d.path().join("nope")).is_err());
    }
}
