//! Who may read the server: what it serves (the heap of every process of its user, their commands)
//! is for that user and root only. Over TCP every request must carry a token that only they can
//! read: a file of mode 0600 (`<control directory>/serve.token` unless `--token-file` names one),
//! made with 256 random bits the first time and shared by every server of the user after, so one
//! scrape configuration (`authorization`/`bearer_token_file` in Parca and Alloy, `basic_auth` with
//! the token as the password) reaches them all. Over a unix socket the kernel tells who the peer
//! is, and no token is needed (`listen.rs`).
use anyhow::{anyhow, bail, Result};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The token file's name in the control directory.
pub const TOKEN_FILE: &str = "serve.token";

/// The token TCP requests must show, and the file it is in.
#[derive(Debug, Clone)]
pub struct Auth {
    token: String,
    pub file: PathBuf,
}

impl Auth {
    /// The token of `file`, or of `<control directory>/serve.token` (the directory made 0700 if
    /// missing); a token is made (mode 0600) when the file does not exist. The file must be ours,
    /// not writable by others and not readable by all (a group may read it: a scraper running as
    /// another user, given that group), its directory not writable by others.
    pub fn load(file: Option<&Path>) -> Result<Auth> {
        let file = match file {
            Some(f) => std::path::absolute(f).unwrap_or_else(|_| f.to_path_buf()),
            None => {
                let dir = memlens_target::ctl_dir();
                std::fs::create_dir_all(&dir).ok();
                dir.join(TOKEN_FILE)
            }
        };
        if let Some(dir) = file.parent() {
            check_dir(dir)?;
        }
        let token = match read_token(&file)? {
            Some(t) => t,
            None => create_token(&file)?,
        };
        Ok(Auth { token, file })
    }

    /// Whether `header` (the request's Authorization) carries the token: `Bearer TOKEN`, or
    /// `Basic` with TOKEN as the password (any user name: `go tool pprof` and curl send the
    /// user:password of a URL so).
    pub fn allows(&self, header: Option<&str>) -> bool {
        let Some(h) = header.map(str::trim) else {
            return false;
        };
        let (scheme, rest) = h.split_once(' ').unwrap_or((h, ""));
        let rest = rest.trim();
        if scheme.eq_ignore_ascii_case("bearer") {
            return same(rest.as_bytes(), self.token.as_bytes());
        }
        if scheme.eq_ignore_ascii_case("basic") {
            use base64::Engine;
            let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(rest) else {
                return false;
            };
            let pass = raw
                .iter()
                .position(|&c| c == b':')
                .map_or(&raw[..0], |i| &raw[i + 1..]);
            return same(pass, self.token.as_bytes());
        }
        false
    }

    /// What a client without the token is told (no secret: where the token is and whose it is).
    pub fn refusal(&self) -> String {
        format!(
            "authorization required: send the token of {} (readable by uid {} only) as \
             'Authorization: Bearer TOKEN', or as the password of basic auth",
            self.file.display(),
            crate::discovery::my_uid()
        )
    }
}

/// Equal bytes, compared in a time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// The token file's directory must be ours (or root's) and not writable by others, unless it is
/// sticky (/tmp: others can make files there but not replace ours, and `read_token` takes only a
/// file of ours): else another user could put a token of theirs in place.
fn check_dir(dir: &Path) -> Result<()> {
    let m = std::fs::metadata(dir)
        .map_err(|e| anyhow!("cannot use the token's directory {}: {e}", dir.display()))?;
    let me = crate::discovery::my_uid();
    let sticky = m.mode() & 0o1000 != 0;
    if (m.uid() != me && m.uid() != 0) || (m.mode() & 0o022 != 0 && !sticky) {
        bail!(
            "the token's directory {} is uid {}'s with mode 0{:o}: it must be ours (uid {me}) and \
             not writable by others (or name another with --token-file)",
            dir.display(),
            m.uid(),
            m.mode() & 0o7777
        );
    }
    Ok(())
}

/// The token in `file` (its first line), None when there is no such file.
fn read_token(file: &Path) -> Result<Option<String>> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(file);
    let mut f = match f {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => bail!("cannot read the token file {}: {e}", file.display()),
    };
    let m = f.metadata()?;
    let me = crate::discovery::my_uid();
    if !m.is_file() || m.uid() != me || m.mode() & 0o027 != 0 {
        bail!(
            "the token file {} must be a file of ours (uid {me}) that others cannot read (chmod \
             600, or 640 for a group), and it is uid {}'s with mode 0{:o}",
            file.display(),
            m.uid(),
            m.mode() & 0o7777
        );
    }
    let mut text = String::new();
    (&mut f).take(4096).read_to_string(&mut text)?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.len() < 16 || !token.bytes().all(|c| c.is_ascii_graphic()) {
        bail!(
            "the token file {} must hold a token of at least 16 visible characters on its first line",
            file.display()
        );
    }
    Ok(Some(token))
}

/// Make a token in `file`: written whole into a private temporary file first, then linked in
/// place, so that two servers starting at once agree on one token (the second reads the first's).
fn create_token(file: &Path) -> Result<String> {
    let mut bytes = [0u8; 32];
    // SAFETY: `bytes` is valid for writing 32 bytes.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        bail!(
            "cannot make a token: getrandom: {}",
            std::io::Error::last_os_error()
        );
    }
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = file.with_extension(format!("tmp.{}", std::process::id()));
    let made = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(format!("{token}\n").as_bytes())?;
        f.sync_all()?;
        std::fs::hard_link(&tmp, file)
    })();
    std::fs::remove_file(&tmp).ok();
    match made {
        Ok(()) => Ok(token),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            read_token(file)?.ok_or_else(|| anyhow!("the token file {} vanished", file.display()))
        }
        Err(e) => Err(anyhow!(
            "cannot write the token file {}: {e}",
            file.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn basic(user_pass: &str) -> String {
        use base64::Engine;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(user_pass)
        )
    }

    #[test]
    fn a_token_is_made_once_kept_private_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t");
        let a = Auth::load(Some(&file)).unwrap();
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(a.token.len(), 64);
        // Another server of the same user reads the same token.
        let b = Auth::load(Some(&file)).unwrap();
        assert_eq!(a.token, b.token);
        let t = a.token.clone();
        assert!(a.allows(Some(&format!("Bearer {t}"))));
        assert!(a.allows(Some(&format!("bearer  {t} "))));
        assert!(a.allows(Some(&basic(&format!("memlens:{t}")))));
        assert!(a.allows(Some(&basic(&format!(":{t}")))));
        for bad in [
            None,
            Some(String::new()),
            Some("Bearer".to_string()),
            Some(format!("Bearer {}", &t[1..])),
            Some(format!("Bearer {t}x")),
            Some(basic(&t)),
            Some(basic(&format!("{t}:x"))),
            Some(format!("Token {t}")),
            Some("Basic !!!".to_string()),
        ] {
            assert!(!a.allows(bad.as_deref()), "{bad:?}");
        }
        // A token file others can read is refused, and so is a directory others can write to.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Auth::load(Some(&file)).unwrap_err().to_string();
        assert!(e.contains("others cannot read"), "{e}");
        // A group may read it (a scraper running as another user, given the group).
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert_eq!(Auth::load(Some(&file)).unwrap().token, t);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = Auth::load(Some(&file)).unwrap_err().to_string();
        assert!(e.contains("not writable by others"), "{e}");
    }
}
