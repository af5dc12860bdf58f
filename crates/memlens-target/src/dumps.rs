//! The files a target's dumps go to: the raw dumps the runtime writes at exit, exec and on
//! `--dump-every` (`<prefix>.<pid>.<seq>.raw`, prefix from `MEMLENS_OUT`), and the default name of a
//! profile asked for from outside.
use anyhow::{Context, Result};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One raw dump: `<prefix>.<pid>.<seq>.raw`.
#[derive(Debug, Clone)]
pub struct Dump {
    /// Where it is.
    pub path: PathBuf,
    /// Process it came from.
    pub pid: u32,
    /// Sequence number within that process.
    pub seq: u64,
    /// Its owner (the user the process ran as when it wrote it).
    pub uid: u32,
}

/// The raw dumps written with `MEMLENS_OUT=prefix`, ordered by pid then sequence number: regular
/// files only (a link, a FIFO or a device of that name is no dump the runtime wrote).
pub fn raw_dumps(prefix: &Path) -> Result<Vec<Dump>> {
    let (Some(dir), Some(stem)) = (prefix.parent(), prefix.file_name()) else {
        return Ok(Vec::new());
    };
    let stem = stem.to_string_lossy();
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let path = e?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(rest) = name
            .strip_prefix(stem.as_ref())
            .and_then(|r| r.strip_prefix('.'))
            .and_then(|r| r.strip_suffix(".raw"))
        else {
            continue;
        };
        let Some((pid, seq)) = rest.split_once('.') else {
            continue;
        };
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        if let (Ok(pid), Ok(seq)) = (pid.parse(), seq.parse()) {
            out.push(Dump {
                path: path.clone(),
                pid,
                seq,
                uid: meta.uid(),
            });
        }
    }
    out.sort_by_key(|d| (d.pid, d.seq));
    Ok(out)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dumps_of_a_prefix_in_pid_and_sequence_order() {
        let d = tempfile::tempdir().unwrap();
        for f in [
            "w.12.10.raw",
            "w.12.2.raw",
            "w.7.1.raw",
            "w.x.1.raw",
            "w.7.1.pb.gz",
            "w2.7.1.raw",
            "v.7.1.raw",
        ] {
            std::fs::write(d.path().join(f), "").unwrap();
        }
        // neither a link nor a FIFO is a dump
        std::os::unix::fs::symlink("/dev/zero", d.path().join("w.8.1.raw")).unwrap();
        let fifo = std::ffi::CString::new(d.path().join("w.9.1.raw").to_str().unwrap()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let got: Vec<(u32, u64)> = raw_dumps(&d.path().join("w"))
            .unwrap()
            .iter()
            .map(|d| (d.pid, d.seq))
            .collect();
        assert_eq!(got, vec![(7, 1), (12, 2), (12, 10)]);
    }
}
