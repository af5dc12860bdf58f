//! The run directory: where every process of one `memlens run` leaves what its profile is made of,
//! and where `memlens run` (at the end) or `memlens report RUNDIR` (later, for daemons that outlived
//! it) find it. Layout (docs/survival.md):
//!
//! ```text
//! <root>/                      /dev/shm/memlens-<uid> (tmpfs), else $TMPDIR/memlens-runs-<uid>;
//!                              0700, or 0711 for root (see below); MEMLENS_RUN_ROOT overrides
//!   lib-<hash>/libmemlens.so   root only: the runtime where a child that dropped its privileges and
//!                              exec'd can still load it
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

/// The directory all runs of this user live in, created and checked.
fn root() -> Result<PathBuf> {
    let me = euid();
    let dir = match std::env::var_os("MEMLENS_RUN_ROOT").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        // tmpfs: the runtime's state pages are written back to no disk
        None if Path::new("/dev/shm").is_dir() => PathBuf::from(format!("/dev/shm/memlens-{me}")),
        None => std::env::temp_dir().join(format!("memlens-runs-{me}")),
    };
    // Root's children may drop their privileges: they must be able to reach their run directory
    // (and the runtime) by a name they know, never to list what is there.
    let mode = if me == 0 { 0o711 } else { 0o700 };
    match fs::DirBuilder::new().mode(mode).create(&dir) {
        Ok(()) => fs::set_permissions(&dir, fs::Permissions::from_mode(mode))
            .with_context(|| format!("cannot set the mode of {}", dir.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("cannot create {}", dir.display())),
    }
    let m = fs::symlink_metadata(&dir).with_context(|| format!("cannot read {}", dir.display()))?;
    if !m.is_dir() || m.uid() != me || m.mode() & 0o022 != 0 {
        bail!(
            "{} must be a directory of yours that nobody else can write to (set MEMLENS_RUN_ROOT to one)",
            dir.display()
        );
    }
    Ok(dir)
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
    /// A new run directory for a program called `name`.
    pub fn create(name: &str) -> Result<RunDir> {
        let root = root()?;
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

/// The runtime to preload. For root it is copied beside the runs (a root-owned directory others
/// can traverse but not write), so that a child which dropped its privileges and exec'd a program
/// can still load it; everyone else's is the cached one (`memlens_native::runtime`).
pub fn runtime_for_run() -> Result<PathBuf> {
    // the cache is made and checked for root too: the same rules, the same errors, for everyone
    let cached = memlens_native::runtime().context("cannot extract the memlens runtime")?;
    if euid() != 0 {
        return Ok(cached);
    }
    let bytes = memlens_native::bytes(memlens_native::RUNTIME)
        .ok_or_else(|| anyhow::anyhow!("memlens was built without its runtime"))?;
    // named by a hash of its bytes, as the cache is: two builds never share a copy
    let hash = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        bytes.hash(&mut h);
        h.finish()
    };
    let dir = root()?.join(format!("lib-{hash:016x}"));
    match fs::DirBuilder::new().mode(0o755).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("cannot create {}", dir.display())),
    }
    let m = fs::symlink_metadata(&dir)?;
    if !m.is_dir() || m.uid() != 0 || m.mode() & 0o022 != 0 {
        bail!("{} is not root's own directory", dir.display());
    }
    let dest = dir.join(memlens_native::RUNTIME);
    if fs::read(&dest).is_ok_and(|b| b == bytes) {
        return Ok(dest);
    }
    let tmp = dir.join(format!(
        ".{}.{}",
        memlens_native::RUNTIME,
        std::process::id()
    ));
    fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755))?;
    fs::rename(&tmp, &dest).with_context(|| format!("cannot write {}", dest.display()))?;
    Ok(dest)
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
