//! Where a module's file is read from: the path a dump names is the path *the process* saw, which
//! from here may be another file or none — a process in a container has its own root. So each
//! module is looked for, by its build ID, in the places that can hold it, and the first whose
//! build ID is the one the runtime recorded is symbolized:
//!
//! 1. its separate debug file inside the process's root (`/usr/lib/debug/.build-id/xx/yyyy.debug`:
//!    a container's `-dbgsym` package), which the symbolizer would not find from the binary;
//! 2. the file in the process's root (`/proc/PID/root/PATH`), while it lives;
//! 3. the very file it mapped (`/proc/PID/map_files/LO-HI`, root only), even if it was replaced or
//!    deleted since;
//! 4. the path on this host (the same image, a shared bind mount, or a program not in a container);
//! 5. a debug file of this host with that build ID (`-dbgsym` installed here).
//!
//! A module found nowhere says, once, where it was looked for and why each place failed.
use std::path::{Path, PathBuf};

/// The process a dump came from, as its files are reached from here (the default: a dump read
/// later, its process gone — only this host's files).
#[derive(Debug, Clone, Default)]
pub struct ProcessFiles {
    /// Its pid here (the host pid), while it lives.
    pub pid: Option<i32>,
    /// Its root (`/proc/PID/root`), when that is not ours.
    pub root: Option<PathBuf>,
}

impl ProcessFiles {
    /// The files of live process `pid` whose root is `root` (None: ours).
    pub fn of(pid: i32, root: Option<PathBuf>) -> ProcessFiles {
        ProcessFiles {
            pid: Some(pid),
            root,
        }
    }
}

/// One place to look: the path to open and what it is, for the reason when it fails.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Place {
    pub path: String,
    pub what: &'static str,
}

/// `debug/.build-id/xx/yyyy.debug` under `base` for `build_id`.
fn debug_file(base: &Path, build_id: &str) -> Option<PathBuf> {
    if build_id.len() < 3 {
        return None;
    }
    Some(base.join(format!(
        "usr/lib/debug/.build-id/{}/{}.debug",
        &build_id[..2],
        &build_id[2..]
    )))
}

/// The `/proc/PID/map_files/LO-HI` of a mapping of `path` in `maps` (the dump's copy of the
/// process's `/proc/self/maps`). A file deleted since it was mapped is `PATH (deleted)` there (and
/// may be in the dump's module path too): its mapping is the only way left to it.
fn mapped(pid: i32, maps: &[String], path: &str) -> Option<String> {
    let live = |p: &str| p.strip_suffix(" (deleted)").unwrap_or(p).to_string();
    let want = live(path);
    maps.iter().find_map(|l| {
        let mut it = l.splitn(6, ' ');
        let range = it.next()?;
        let file = it.nth(4)?.trim_start();
        (live(file) == want).then(|| format!("/proc/{pid}/map_files/{range}"))
    })
}

/// The places module `path` (build ID `build_id`, may be empty) of the process `files` may be
/// found, in the order they are tried.
pub(crate) fn places(
    files: &ProcessFiles,
    maps: &[String],
    path: &str,
    build_id: &str,
) -> Vec<Place> {
    let mut v = Vec::new();
    let shown = |p: PathBuf| p.to_string_lossy().into_owned();
    if let Some(root) = &files.root {
        if let Some(d) = debug_file(root, build_id).filter(|d| d.exists()) {
            v.push(Place {
                path: shown(d),
                what: "its debug file in the process's root",
            });
        }
        if let Some(inside) = path.strip_prefix('/') {
            v.push(Place {
                path: shown(root.join(inside)),
                what: "in the process's root",
            });
        }
    }
    if let Some(m) = files.pid.and_then(|pid| mapped(pid, maps, path)) {
        v.push(Place {
            path: m,
            what: "the file the process mapped",
        });
    }
    v.push(Place {
        path: path.to_string(),
        what: "on this host",
    });
    if let Some(d) = debug_file(Path::new("/"), build_id).filter(|d| d.exists()) {
        v.push(Place {
            path: shown(d),
            what: "this host's debug file",
        });
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_in_order() {
        let maps = vec![
            "7f00-7f10 r--p 00000000 08:01 12 /usr/lib/libx.so".to_string(),
            "7f10-7f20 r-xp 00010000 08:01 12 /usr/lib/libx.so".to_string(),
        ];
        let gone = vec!["7f00-7f10 r-xp 00000000 08:01 12 /tmp/p (deleted)".to_string()];
        assert_eq!(
            mapped(7, &gone, "/tmp/p"),
            Some("/proc/7/map_files/7f00-7f10".into())
        );
        assert_eq!(
            mapped(7, &gone, "/tmp/p (deleted)"),
            Some("/proc/7/map_files/7f00-7f10".into())
        );
        let host = places(&ProcessFiles::default(), &maps, "/usr/lib/libx.so", "");
        assert_eq!(host.len(), 1);
        assert_eq!(host[0].path, "/usr/lib/libx.so");
        let live = ProcessFiles::of(42, Some(PathBuf::from("/proc/42/root")));
        let got: Vec<String> = places(&live, &maps, "/usr/lib/libx.so", "abcdef")
            .into_iter()
            .map(|p| p.path)
            .collect();
        assert_eq!(
            got,
            [
                "/proc/42/root/usr/lib/libx.so",
                "/proc/42/map_files/7f00-7f10",
                "/usr/lib/libx.so"
            ]
        );
        assert_eq!(
            debug_file(Path::new("/r"), "abcdef"),
            Some(PathBuf::from("/r/usr/lib/debug/.build-id/ab/cdef.debug"))
        );
        assert_eq!(debug_file(Path::new("/r"), ""), None);
    }
}
