//! A module file, before the symbolizer reads it.
//!
//! A module path comes from a dump, a state file or a live process: whoever wrote it may name
//! `/dev/zero`, a FIFO, a device with side effects on open, or an ELF file built to hurt. So:
//!
//! * the file is opened by [`crate::input::open_regular`] (links resolved by name, then
//!   `O_NOFOLLOW|O_NONBLOCK`; a regular file of at most the input budget, nothing else is opened);
//! * its build ID and sections are read through a read cache (the few bytes they take, never the
//!   whole file);
//! * blazesym is handed `/proc/self/fd/N`, this very descriptor, so the file it maps is the one
//!   checked whatever happens to the name meanwhile;
//! * what blazesym would open beside it — the debug file a `.gnu_debuglink`, `.gnu_debugaltlink`
//!   or `.debug_sup` names, in the module's directory or under [`DEBUG_DIRS`] — must be a regular
//!   file wherever it exists, and is checked the same way;
//! * compressed sections (which blazesym inflates whole into memory) must inflate to what their
//!   headers say and, together, to at most [`crate::input::INFLATION`] times their compressed
//!   size (at least [`crate::input::FLOOR`]): a zlib bomb in `.debug_info` is refused before it
//!   is inflated.
use crate::input::{kind, open_regular, Allowance, Links};
use object::{CompressionFormat, Object, ObjectSection};
use std::fs::{File, Metadata};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Where blazesym looks for separate debug files (its builder is given exactly these).
pub(crate) const DEBUG_DIRS: [&str; 2] = ["/usr/lib/debug", "/lib/debug"];

/// How deep links are checked: the module's debug link, and the debug file's own altlink.
const LINK_DEPTH: u32 = 2;

/// A module file opened to be symbolized.
pub(crate) struct ModFile {
    file: File,
    /// Its metadata, from the descriptor.
    pub meta: Metadata,
    /// Its path with links resolved.
    real: PathBuf,
}

impl ModFile {
    /// Open the module file at `path` (only a regular file; see the module docs).
    pub fn open(path: &str) -> Result<ModFile, String> {
        let links = links_of(path);
        let (file, meta) = open_regular(Path::new(path), links).map_err(|e| format!("{e:#}"))?;
        let real = match links {
            // realpath would name a file of this root: the name in that root is the real one
            Links::Follow => PathBuf::from(path),
            _ => std::fs::canonicalize(path).unwrap_or_else(|_| PathBuf::from(path)),
        };
        Ok(ModFile { file, meta, real })
    }

    /// The name blazesym opens: this descriptor.
    pub fn fd_path(&self) -> String {
        format!("/proc/self/fd/{}", self.file.as_raw_fd())
    }

    /// Its build ID (lower-case hex; `None` when it has none), once everything blazesym will read
    /// from and beside it has been checked.
    pub fn checked_build_id(&self) -> Result<Option<String>, String> {
        check(&self.file, &self.real, LINK_DEPTH)
    }
}

/// How the links of module path `path` are treated: a file in another process's root
/// (`/proc/PID/root/…`) or one it mapped (`/proc/PID/map_files/LO-HI`, a link to the name *it*
/// sees) must be followed by open(2) — resolved by name here, either names a file of this root,
/// another file or none ([`crate::lookup`] makes these paths).
fn links_of(path: &str) -> Links {
    let in_proc = path.strip_prefix("/proc/").and_then(|rest| {
        let (pid, rest) = rest.split_once('/')?;
        let place = rest.split('/').next()?;
        (!pid.is_empty()
            && pid.bytes().all(|b| b.is_ascii_digit())
            && matches!(place, "root" | "map_files"))
        .then_some(())
    });
    if in_proc.is_some() {
        Links::Follow
    } else {
        Links::Resolve
    }
}

/// Check the ELF file `f` (at `real`) and, `depth` links deep, the files it links to; returns its
/// build ID.
fn check(f: &File, real: &Path, depth: u32) -> Result<Option<String>, String> {
    let shown = real.display();
    let cache = object::ReadCache::new(f);
    let obj =
        object::File::parse(&cache).map_err(|e| format!("{shown} is not an ELF file: {e}"))?;
    let id = obj
        .build_id()
        .map_err(|e| format!("{shown}: bad build id note: {e}"))?;
    let hex = id.map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>());
    check_compressed(&obj, f, real)?;
    if depth > 0 {
        for target in link_targets(&obj) {
            for cand in candidates(real, hex.as_deref(), &target) {
                check_candidate(&cand, depth - 1)?;
            }
        }
    }
    Ok(hex)
}

/// A file blazesym may open by a link: absent (or unreachable: blazesym skips what it cannot
/// stat), or a regular file that passes [`check`].
fn check_candidate(cand: &Path, depth: u32) -> Result<(), String> {
    // blazesym follows links here (stat, then open): so does this check.
    let Ok(m) = std::fs::metadata(cand) else {
        return Ok(());
    };
    if !m.is_file() {
        return Err(format!(
            "its debug link leads to {}, {}: not followed",
            cand.display(),
            kind(&m.file_type())
        ));
    }
    let (f, _) = open_regular(cand, Links::Resolve).map_err(|e| format!("{e:#}"))?;
    let real = std::fs::canonicalize(cand).unwrap_or_else(|_| cand.to_path_buf());
    check(&f, &real, depth)
        .map(|_| ())
        .map_err(|e| format!("its debug file {}: {e}", cand.display()))
}

/// The names `.gnu_debuglink`, `.gnu_debugaltlink` and `.debug_sup` give (unreadable ones are
/// skipped: blazesym fails on them without opening anything).
fn link_targets<'a>(obj: &object::File<'a, &'a object::ReadCache<&'a File>>) -> Vec<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut v = Vec::new();
    let mut push = |b: &[u8]| {
        if !b.is_empty() {
            v.push(PathBuf::from(std::ffi::OsStr::from_bytes(b)));
        }
    };
    if let Ok(Some((name, _crc))) = obj.gnu_debuglink() {
        push(name);
    }
    if let Ok(Some((path, _id))) = obj.gnu_debugaltlink() {
        push(path);
    }
    // .debug_sup: version (2 bytes), is_supplementary (1), a NUL-terminated file name, checksum
    if let Some(data) = obj
        .section_by_name(".debug_sup")
        .and_then(|s| s.data().ok())
    {
        if let Some(rest) = data.get(3..) {
            push(&rest[..rest.iter().position(|&c| c == 0).unwrap_or(rest.len())]);
        }
    }
    v
}

/// Every path blazesym may open for the link `target` of the file at `real` (a superset of its
/// search: the build-ID directories, the debug directories, the file's own directory, and the
/// debug directories' copies of each directory above it).
fn candidates(real: &Path, build_id: Option<&str>, target: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for d in DEBUG_DIRS {
        let d = Path::new(d);
        if let Some(id) = build_id.filter(|id| id.len() > 2) {
            v.push(d.join(format!(".build-id/{}/{}.debug", &id[..2], &id[2..])));
        }
        v.push(d.join(target));
        for a in real.ancestors().skip(1) {
            let rel = a.strip_prefix("/").unwrap_or(a);
            if !rel.as_os_str().is_empty() {
                v.push(d.join(rel).join(target));
            }
        }
    }
    if let Some(dir) = real.parent() {
        v.push(dir.join(target));
    }
    v.sort();
    v.dedup();
    v
}

/// Compressed sections inflate to what their headers say, and all of them together to no more
/// than the allowance of their compressed bytes.
fn check_compressed<'a>(
    obj: &object::File<'a, &'a object::ReadCache<&'a File>>,
    f: &File,
    real: &Path,
) -> Result<(), String> {
    let (mut packed, mut inflated) = (0u64, 0u64);
    let mut zlib = Vec::new();
    for s in obj.sections() {
        let Ok(r) = s.compressed_file_range() else {
            continue; // blazesym cannot read it either
        };
        if r.format == CompressionFormat::None {
            continue;
        }
        packed = packed.saturating_add(r.compressed_size);
        inflated = inflated.saturating_add(r.uncompressed_size);
        if r.format == CompressionFormat::Zlib {
            zlib.push((s.name().unwrap_or("?").to_string(), r));
        }
    }
    let allowed = Allowance::for_bytes(packed).now();
    if inflated > allowed {
        use memlens_measure::units::format_size as size;
        return Err(format!(
            "{}: its compressed sections would inflate from {} to {}, more than the {} memlens \
             inflates for them (MEMLENS_MAX_INPUT=SIZE raises the limit)",
            real.display(),
            size(packed),
            size(inflated),
            size(allowed)
        ));
    }
    for (name, r) in zlib {
        let got = inflated_size(f, r.offset, r.compressed_size, r.uncompressed_size)
            .map_err(|e| format!("{}: section {name}: {e}", real.display()))?;
        if got != r.uncompressed_size {
            return Err(format!(
                "{}: section {name} inflates to {got} bytes, not the {} its header says",
                real.display(),
                r.uncompressed_size
            ));
        }
    }
    Ok(())
}

/// How many bytes the zlib stream at `offset` (`len` bytes) inflates to, counting at most
/// `expected + 1` (streamed: nothing is kept).
fn inflated_size(f: &File, offset: u64, len: u64, expected: u64) -> std::io::Result<u64> {
    let region = Region {
        f,
        at: offset,
        end: offset.saturating_add(len),
    };
    let mut z = flate2::read::ZlibDecoder::new(std::io::BufReader::with_capacity(1 << 16, region));
    std::io::copy(&mut (&mut z).take(expected + 1), &mut std::io::sink())
}

/// A byte range of a file, read by position.
struct Region<'a> {
    f: &'a File,
    at: u64,
    end: u64,
}

impl Read for Region<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let want = (buf.len() as u64).min(self.end.saturating_sub(self.at)) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = self.f.read_at(&mut buf[..want], self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_of_another_root_are_followed_not_resolved() {
        assert_eq!(links_of("/proc/42/root/usr/bin/x"), Links::Follow);
        assert_eq!(links_of("/proc/42/map_files/7f00-7f10"), Links::Follow);
        assert_eq!(links_of("/proc/self/root/usr/bin/x"), Links::Resolve);
        assert_eq!(links_of("/proc//root/x"), Links::Resolve);
        assert_eq!(links_of("/proc/42/cwd/x"), Links::Resolve);
        assert_eq!(links_of("/usr/lib/libstdc++.so.6"), Links::Resolve);
    }

    #[test]
    fn candidates_cover_the_directories_blazesym_searches() {
        let c = candidates(
            Path::new("/opt/app/lib/libx.so"),
            Some("abcdef0123"),
            Path::new("libx.debug"),
        );
        for want in [
            "/usr/lib/debug/.build-id/ab/cdef0123.debug",
            "/usr/lib/debug/libx.debug",
            "/lib/debug/libx.debug",
            "/opt/app/lib/libx.debug",
            "/usr/lib/debug/opt/app/lib/libx.debug",
            "/usr/lib/debug/opt/libx.debug",
        ] {
            assert!(c.contains(&PathBuf::from(want)), "{want}: {c:?}");
        }
        // An absolute target (an altlink) is itself the candidate.
        let c = candidates(Path::new("/a/b.so"), None, Path::new("/tmp/fifo"));
        assert_eq!(c, vec![PathBuf::from("/tmp/fifo")]);
    }

    #[test]
    fn devices_and_fifos_are_refused_without_being_read() {
        let e = ModFile::open("/dev/zero").err().unwrap();
        assert!(e.contains("a character device, not a regular file"), "{e}");
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("f");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = ModFile::open(fifo.to_str().unwrap()).err().unwrap();
        assert!(e.contains("a FIFO, not a regular file"), "{e}");
        // A link to a device is resolved by name, then refused.
        let link = d.path().join("l");
        std::os::unix::fs::symlink("/dev/urandom", &link).unwrap();
        let e = ModFile::open(link.to_str().unwrap()).err().unwrap();
        assert!(e.contains("(/dev/urandom) is a character device"), "{e}");
    }
}
