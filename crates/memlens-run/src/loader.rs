//! Which C library a program runs on, read from its ELF `PT_INTERP` before `memlens run` starts it.
//!
//! The runtime is built against glibc (it uses `_dl_find_object`, glibc's `__libc_*` entry points):
//! preloaded into a program whose loader is musl's, the loader stops with `Error relocating …
//! symbol not found` and the program never starts (rc 127). A build of memlens made where
//! musl-gcc exists also carries a runtime built for musl, which musl's loader finds through the
//! `$LIB` layout (`memlens_native::PRELOAD_NAME`); without it, such a program is run unprofiled
//! instead, and memlens says why in one line.
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

const PT_INTERP: u32 = 3;

/// The loader a program was linked for, when memlens's glibc runtime cannot be loaded by it: the C
/// library's name and the loader's path (e.g. `("musl", "/lib/ld-musl-x86_64.so.1")`). None for
/// glibc, for static programs, scripts, and anything unreadable (the usual path decides then).
pub fn unsupported_libc(prog: &OsStr) -> Option<(&'static str, String)> {
    let interp = interp_of(&resolve(prog)?)?;
    let name = Path::new(&interp)
        .file_name()?
        .to_string_lossy()
        .into_owned();
    name.starts_with("ld-musl").then_some(("musl", interp))
}

/// Does this build of memlens carry a runtime for the C library `libc` (as named by
/// [`unsupported_libc`])?
pub fn runtime_built_for(libc: &str) -> bool {
    libc == "musl" && memlens_native::bytes(memlens_native::RUNTIME_MUSL).is_some()
}

/// The file `Command::new(prog)` executes: a name without `/` is looked up in PATH.
fn resolve(prog: &OsStr) -> Option<PathBuf> {
    if prog.as_bytes().contains(&b'/') {
        return Some(PathBuf::from(prog));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

/// The program's PT_INTERP string, for a little-endian ELF (32 or 64 bit).
fn interp_of(file: &Path) -> Option<String> {
    let mut f = std::fs::File::open(file).ok()?;
    let mut head = vec![0u8; 64 * 1024];
    let n = read_up_to(&mut f, &mut head)?;
    let h = &head[..n];
    if h.len() < 64 || &h[..4] != b"\x7fELF" || h[5] != 1 {
        return None;
    }
    let wide = h[4] == 2;
    let u16_at = |o: usize| Some(u16::from_le_bytes(h.get(o..o + 2)?.try_into().ok()?) as usize);
    let u32_at = |o: usize| Some(u32::from_le_bytes(h.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(h.get(o..o + 8)?.try_into().ok()?));
    let word = |o: usize| {
        if wide {
            u64_at(o).map(|v| v as usize)
        } else {
            u32_at(o).map(|v| v as usize)
        }
    };
    let (phoff, phentsize, phnum) = if wide {
        (word(32)?, u16_at(54)?, u16_at(56)?)
    } else {
        (word(28)?, u16_at(42)?, u16_at(44)?)
    };
    for i in 0..phnum {
        let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if u32_at(ph)? != PT_INTERP {
            continue;
        }
        let (off, size) = if wide {
            (word(ph + 8)?, word(ph + 32)?)
        } else {
            (word(ph + 4)?, word(ph + 16)?)
        };
        let s = h.get(off..off.checked_add(size)?)?;
        let s = s.split(|&b| b == 0).next()?;
        return Some(String::from_utf8_lossy(s).into_owned());
    }
    None
}

fn read_up_to(f: &mut std::fs::File, buf: &mut [u8]) -> Option<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(_) => return None,
        }
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_programs_and_scripts_are_not_flagged() {
        assert_eq!(unsupported_libc(OsStr::new("/bin/true")), None);
        assert_eq!(unsupported_libc(OsStr::new("true")), None);
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("s.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        assert_eq!(unsupported_libc(script.as_os_str()), None);
        assert_eq!(unsupported_libc(OsStr::new("/no/such/program")), None);
    }

    #[test]
    fn the_interp_of_a_glibc_program_is_read() {
        let i = interp_of(Path::new("/bin/true")).expect("PT_INTERP of /bin/true");
        assert!(i.contains("ld-linux"), "{i}");
    }
}
