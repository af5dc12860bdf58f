//! Where the server listens: TCP (`HOST:PORT`, every request must carry the token: `auth.rs`) or
//! a unix socket (`unix:PATH`, mode 0600, every peer checked to be our user or root by its
//! credentials, so no token is needed), and the connections either gives.
use anyhow::{anyhow, Result};
use memlens_measure::error::usage;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A bound listening socket.
pub enum Listener {
    Tcp(TcpListener),
    /// The socket and its path (removed when the listener is dropped).
    Unix(UnixListener, PathBuf),
}

/// An accepted connection.
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Listener {
    /// Bind `listen`: `unix:PATH`, or `HOST:PORT` (port 0 picks a free one).
    pub fn bind(listen: &str) -> Result<Listener> {
        if let Some(path) = listen.strip_prefix("unix:") {
            return bind_unix(Path::new(path));
        }
        let addr: SocketAddr = listen
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| {
                usage(format!(
                    "bad listen address '{listen}': expected HOST:PORT (e.g. 127.0.0.1:6060) or unix:PATH"
                ))
            })?;
        let l = TcpListener::bind(addr).map_err(|e| anyhow!("cannot listen on {listen}: {e}"))?;
        Ok(Listener::Tcp(l))
    }

    pub fn is_unix(&self) -> bool {
        matches!(self, Listener::Unix(..))
    }

    /// The address actually bound: `127.0.0.1:PORT` (the port chosen when 0 was asked) or the
    /// socket's path.
    pub fn addr(&self) -> String {
        match self {
            Listener::Tcp(l) => l
                .local_addr()
                .map_or_else(|_| "?".into(), |a| a.to_string()),
            Listener::Unix(_, p) => p.display().to_string(),
        }
    }

    /// Where a client reaches it, for the announcement: `http://ADDR` or `unix:PATH`.
    pub fn url(&self) -> String {
        match self {
            Listener::Tcp(_) => format!("http://{}", self.addr()),
            Listener::Unix(_, p) => format!("unix:{}", p.display()),
        }
    }

    pub fn set_nonblocking(&self, on: bool) -> std::io::Result<()> {
        match self {
            Listener::Tcp(l) => l.set_nonblocking(on),
            Listener::Unix(l, _) => l.set_nonblocking(on),
        }
    }

    pub fn accept(&self) -> std::io::Result<Stream> {
        match self {
            Listener::Tcp(l) => l.accept().map(|(s, _)| Stream::Tcp(s)),
            Listener::Unix(l, _) => l.accept().map(|(s, _)| Stream::Unix(s)),
        }
    }
}

impl AsRawFd for Listener {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Listener::Tcp(l) => l.as_raw_fd(),
            Listener::Unix(l, _) => l.as_raw_fd(),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, p) = self {
            std::fs::remove_file(p).ok();
        }
    }
}

/// A unix socket at `path` that only our user can connect to: created under a umask that leaves
/// it mode 0600 from its first moment (no window in which another user could connect). A socket
/// left there by a server that is gone is replaced; one that answers is not.
fn bind_unix(path: &Path) -> Result<Listener> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if !m.file_type().is_socket() {
            return Err(anyhow!(
                "cannot listen on unix:{}: it exists and is not a socket",
                path.display()
            ));
        }
        if UnixStream::connect(path).is_ok() {
            return Err(anyhow!(
                "cannot listen on unix:{}: a server is already listening there",
                path.display()
            ));
        }
        std::fs::remove_file(path).ok();
    }
    // Bound and listening under a name of its own first, then renamed into place: the path appears
    // only once the socket listens (a client that connects as soon as it sees the path, as a
    // scraper started beside us does, is never refused in between).
    let name = path
        .file_name()
        .map_or("serve.sock".into(), |n| n.to_string_lossy());
    let tmp = path.with_file_name(format!(".{name}.{}", std::process::id()));
    std::fs::remove_file(&tmp).ok();
    // SAFETY: umask has no preconditions; it is restored right after the bind.
    let old = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(&tmp);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let l = bound.map_err(|e| anyhow!("cannot listen on unix:{}: {e}", path.display()))?;
    if let Err(e) = std::fs::rename(&tmp, path) {
        std::fs::remove_file(&tmp).ok();
        return Err(anyhow!("cannot listen on unix:{}: {e}", path.display()));
    }
    Ok(Listener::Unix(l, path.to_path_buf()))
}

impl Stream {
    pub fn set_read_timeout(&self, d: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(d),
            Stream::Unix(s) => s.set_read_timeout(d),
        }
    }

    pub fn set_write_timeout(&self, d: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(d),
            Stream::Unix(s) => s.set_write_timeout(d),
        }
    }

    /// Blocking I/O, and no Nagle delay on TCP (a reply is written at once).
    pub fn prepare(&self) {
        match self {
            Stream::Tcp(s) => {
                s.set_nonblocking(false).ok();
                s.set_nodelay(true).ok();
            }
            Stream::Unix(s) => {
                s.set_nonblocking(false).ok();
            }
        }
    }

    /// Whether the peer is known to be our own user or root: a unix socket's peer, by its
    /// credentials (SO_PEERCRED). A TCP peer never is; it must show the token.
    pub fn peer_is_trusted(&self) -> bool {
        let Stream::Unix(s) = self else {
            return false;
        };
        peer_uid(s.as_raw_fd()).is_some_and(|uid| uid == 0 || uid == crate::discovery::my_uid())
    }
}

/// The uid of the process at the other end of unix socket `fd`.
fn peer_uid(fd: RawFd) -> Option<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writing and describe a ucred.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(cred.uid)
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_unix_socket_is_ours_alone_and_removed_after() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let l = Listener::bind(&format!("unix:{}", path.display())).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(l.url(), format!("unix:{}", path.display()));
        // A second server on the same path is refused while the first listens.
        assert!(Listener::bind(&format!("unix:{}", path.display())).is_err());
        let c = UnixStream::connect(&path).unwrap();
        let s = l.accept().unwrap();
        assert!(s.peer_is_trusted());
        drop(c);
        drop(l);
        assert!(!path.exists());
        assert!(Listener::bind("nowhere").is_err());
    }
}
