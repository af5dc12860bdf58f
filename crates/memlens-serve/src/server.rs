//! HTTP/1.1 over TCP or a unix socket (`listen.rs`) for the endpoints, built to survive its clients: a thread per connection, at
//! most [`MAX_CONNECTIONS`] of them, timeouts on everything a client can make us wait for, and
//! bounded request sizes. Requests are parsed by `httparse`.
//!
//! * A connection with no request under way (waiting for a request, or for the rest of its head)
//!   is *idle*. When a new connection would pass the cap, the connection idle the longest is
//!   closed to make room: a client that holds many idle connections (or sends its headers a byte
//!   at a time) cannot lock scrapers out, and the server never runs out of file descriptors.
//!   Only when every connection is busy with a request is the new one refused (503).
//! * Idle connections are closed after [`IDLE_TIMEOUT`]; a request head must arrive in
//!   [`HEAD_TIMEOUT`] from its first byte, a body likewise; a reply must be taken in
//!   [`WRITE_TIMEOUT`].
//! * Failing to accept for want of descriptors or memory is waited out with a warning; any other
//!   failure of the listening socket ends the server with an error (`memlens: error: …`, exit 1).
use crate::http::Reply;
use crate::listen::{Listener, Stream};
use crate::stop::{self, Stop};
use anyhow::{anyhow, Result};
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Open connections at most (each has a thread and a descriptor).
pub const MAX_CONNECTIONS: usize = 128;
/// A connection with no request under way is closed after this.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(15);
/// A request's head (and then its body) must arrive within this from its first byte.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// A reply must be taken within this.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest request head (request line and headers).
const MAX_HEAD: usize = 16 << 10;
/// Longest request body (`POST /debug/pprof/symbol`: addresses).
pub const MAX_BODY: usize = 1 << 20;

/// One HTTP request.
pub struct Request {
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    /// The Host header (how the client reached us).
    pub host: Option<String>,
    /// The Authorization header.
    pub authorization: Option<String>,
    /// It came from our own user or root over the unix socket (their credentials say so).
    pub trusted: bool,
    pub body: Vec<u8>,
}

/// What answers a request.
pub type Handler = dyn Fn(&Request) -> Reply + Send + Sync;

struct Conn {
    /// Its socket, to shut it down from outside its thread. The thread removes the entry (under
    /// the lock) before it closes the socket, so the descriptor is never another's by then.
    fd: RawFd,
    /// Since when it has had no request under way (None: busy with one).
    idle_since: Option<Instant>,
}

/// The open connections.
#[derive(Default)]
struct Conns {
    map: Mutex<HashMap<u64, Conn>>,
    next: AtomicU64,
}

impl Conns {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Conn>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Register `s`, making room by closing the connection idle the longest when at the cap.
    /// `None` when every connection is busy.
    fn admit(&self, s: &Stream) -> Option<u64> {
        let mut m = self.lock();
        if m.len() >= MAX_CONNECTIONS {
            let oldest = m
                .iter()
                .filter_map(|(id, c)| c.idle_since.map(|t| (t, *id)))
                .min()?
                .1;
            if let Some(c) = m.remove(&oldest) {
                shut(c.fd);
            }
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        m.insert(
            id,
            Conn {
                fd: s.as_raw_fd(),
                idle_since: Some(Instant::now()),
            },
        );
        Some(id)
    }

    /// Mark `id` idle or busy; false when it was closed meanwhile (evicted).
    fn set_idle(&self, id: u64, idle: bool) -> bool {
        match self.lock().get_mut(&id) {
            Some(c) => {
                c.idle_since = if idle { Some(Instant::now()) } else { None };
                true
            }
            None => false,
        }
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    fn len(&self) -> usize {
        self.lock().len()
    }

    /// Close every idle connection (the server is stopping).
    fn close_idle(&self) {
        self.lock().retain(|_, c| {
            let busy = c.idle_since.is_none();
            if !busy {
                shut(c.fd);
            }
            busy
        });
    }
}

/// Shut a connection's socket down (its thread sees the end of its stream and leaves).
fn shut(fd: RawFd) {
    // SAFETY: `fd` is open: its thread closes it only after removing it from the table, and this
    // is called with the table locked and the entry present.
    unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
}

/// Accept and serve connections on `listener` until a signal arrives (when `signals` is set) or
/// `keep_going` says stop (checked about every 200 ms). Then close idle connections, end open
/// windows through `stop`, and wait (up to 10 s) for the requests under way.
pub fn serve(
    listener: Listener,
    handler: Arc<Handler>,
    stop: Arc<Stop>,
    keep_going: impl Fn() -> bool,
    signals: bool,
) -> Result<()> {
    listener
        .set_nonblocking(true)
        .map_err(|e| anyhow!("cannot set up the listening socket: {e}"))?;
    let conns = Arc::new(Conns::default());
    let mut last_warning: Option<Instant> = None;
    while keep_going() && !(signals && stop::signalled().is_some()) {
        if !readable(&listener, 200) {
            continue;
        }
        match listener.accept() {
            Ok(s) => start(s, &conns, &handler, &stop),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::Interrupted | ErrorKind::ConnectionAborted
                ) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                ) =>
            {
                // Out of descriptors or memory (something else in this process or machine):
                // wait it out, saying so once a minute.
                if last_warning.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                    eprintln!("memlens: warning: cannot accept connections: {e}; retrying");
                    last_warning = Some(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(anyhow!("the listening socket failed: {e}")),
        }
    }
    drop(listener);
    stop.trigger();
    conns.close_idle();
    let t0 = Instant::now();
    while conns.len() > 0 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
        conns.close_idle();
    }
    Ok(())
}

/// Wait up to `ms` for a connection to accept.
fn readable(l: &Listener, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd: l.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

/// Give `s` a thread of its own, or refuse it when every connection is busy.
fn start(s: Stream, conns: &Arc<Conns>, handler: &Arc<Handler>, stop: &Arc<Stop>) {
    s.prepare();
    s.set_write_timeout(Some(WRITE_TIMEOUT)).ok();
    let Some(id) = conns.admit(&s) else {
        let mut s = s;
        s.set_write_timeout(Some(Duration::from_secs(1))).ok();
        let r = Reply::error(503, "every connection is busy with a request; retry later");
        write_reply(&mut s, "GET", &r, true).ok();
        return;
    };
    let (conns2, handler, stop) = (conns.clone(), handler.clone(), stop.clone());
    let spawned = std::thread::Builder::new()
        .name("memlens-serve".into())
        .spawn(move || {
            let s = connection(s, id, &conns2, &*handler, &stop);
            conns2.remove(id);
            drop(s);
        });
    if spawned.is_err() {
        conns.remove(id);
    }
}

/// Serve the requests of one connection, one after the other (HTTP/1.1 keep-alive); the socket
/// is handed back to be closed once the connection is out of the table.
fn connection(mut s: Stream, id: u64, conns: &Conns, handler: &Handler, stop: &Stop) -> Stream {
    let trusted = s.peer_is_trusted();
    let mut buf = Vec::new();
    loop {
        if !conns.set_idle(id, true) {
            return s;
        }
        let mut req = match read_request(&mut s, &mut buf) {
            Ok(Some(r)) => r,
            Ok(None) => return s,
            Err(reply) => {
                write_reply(&mut s, "GET", &reply, true).ok();
                return s;
            }
        };
        if !conns.set_idle(id, false) {
            return s;
        }
        req.request.trusted = trusted;
        let reply = handler(&req.request);
        let close = req.close || stop.is_set();
        if write_reply(&mut s, &req.request.method, &reply, close).is_err() || close {
            return s;
        }
    }
}

struct Parsed {
    request: Request,
    /// The client asked to close after this request (or speaks HTTP/1.0).
    close: bool,
}

/// Read one request from `s` (bytes already read in `buf`, left over ones stay there). `Ok(None)`:
/// the client left or stayed idle too long; `Err`: a reply saying what was wrong with its request.
fn read_request(s: &mut Stream, buf: &mut Vec<u8>) -> Result<Option<Parsed>, Reply> {
    let idle_end = Instant::now() + IDLE_TIMEOUT;
    let mut head_end: Option<Instant> = None;
    let (head_len, mut parsed, body_len) = loop {
        if !buf.is_empty() && head_end.is_none() {
            head_end = Some(Instant::now() + HEAD_TIMEOUT);
        }
        if let Some(p) = parse_head(buf)? {
            break p;
        }
        if buf.len() > MAX_HEAD {
            return Err(Reply::error(431, "request head too large"));
        }
        if !fill(s, buf, head_end.unwrap_or(idle_end)) {
            return Ok(None);
        }
    };
    if body_len > MAX_BODY {
        return Err(Reply::error(413, "request body too large"));
    }
    let body_end = Instant::now() + HEAD_TIMEOUT;
    while buf.len() < head_len + body_len {
        if !fill(s, buf, body_end) {
            return Ok(None);
        }
    }
    parsed.request.body = buf[head_len..head_len + body_len].to_vec();
    buf.drain(..head_len + body_len);
    Ok(Some(parsed))
}

/// Read more of the request into `buf`, waiting until `deadline`; false when the client left, the
/// deadline passed, or the socket failed.
fn fill(s: &mut Stream, buf: &mut Vec<u8>, deadline: Instant) -> bool {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() || s.set_read_timeout(Some(left)).is_err() {
        return false;
    }
    let mut chunk = [0u8; 4096];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => return false,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                return true;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
}

/// The request in `buf` when its head is complete: (head length, request, body length).
fn parse_head(buf: &[u8]) -> Result<Option<(usize, Parsed, usize)>, Reply> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut r = httparse::Request::new(&mut headers);
    let n = match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Reply::error(431, "too many request headers"))
        }
        Err(e) => return Err(Reply::error(400, &format!("malformed request: {e}"))),
    };
    let header = |name: &str| {
        r.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_string())
    };
    if header("Transfer-Encoding").is_some() {
        return Err(Reply::error(
            501,
            "chunked request bodies are not supported (send Content-Length)",
        ));
    }
    let body_len = match header("Content-Length") {
        None => 0,
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| Reply::error(400, "bad Content-Length"))?,
    };
    let connection = header("Connection")
        .unwrap_or_default()
        .to_ascii_lowercase();
    let close = connection.contains("close")
        || (r.version == Some(0) && !connection.contains("keep-alive"));
    let request = Request {
        method: r.method.unwrap_or("GET").to_string(),
        target: r.path.unwrap_or("/").to_string(),
        host: header("Host"),
        authorization: header("Authorization"),
        trusted: false,
        body: Vec::new(),
    };
    Ok(Some((n, Parsed { request, close }, body_len)))
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Payload Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// Write `r` (its headers only for HEAD) and say whether the connection stays open.
fn write_reply(s: &mut Stream, method: &str, r: &Reply, close: bool) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nX-Content-Type-Options: nosniff\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len()
    );
    if let Some(f) = r.file {
        head += &format!("Content-Disposition: attachment; filename=\"{f}\"\r\n");
    }
    if let Some(a) = r.allow {
        head += &format!("Allow: {a}\r\n");
    }
    if r.status == 401 {
        head += "WWW-Authenticate: Bearer realm=\"memlens serve\"\r\n";
    }
    head += if close {
        "Connection: close\r\n\r\n"
    } else {
        "Connection: keep-alive\r\n\r\n"
    };
    let mut out = head.into_bytes();
    if method != "HEAD" {
        out.extend_from_slice(&r.body);
    }
    s.write_all(&out)?;
    s.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Result<Option<(usize, Parsed, usize)>, Reply> {
        parse_head(text.as_bytes())
    }

    #[test]
    fn requests_are_parsed_and_bounded() {
        assert!(head("GET /x HTTP/1.1\r\nHost: a").unwrap().is_none());
        let text =
            "POST /debug/pprof/symbol HTTP/1.1\r\nHost: h:1\r\nContent-Length: 5\r\n\r\n0x1+0";
        let (n, p, body) = head(text).unwrap().unwrap();
        assert_eq!(
            (p.request.method.as_str(), p.request.target.as_str()),
            ("POST", "/debug/pprof/symbol")
        );
        assert_eq!(p.request.host.as_deref(), Some("h:1"));
        assert_eq!((body, p.close), (5, false));
        assert_eq!(n, text.len() - 5);
        // HTTP/1.0 closes unless it asks to keep the connection; 1.1 closes when asked to.
        assert!(head("GET / HTTP/1.0\r\n\r\n").unwrap().unwrap().1.close);
        assert!(
            !head("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
                .unwrap()
                .unwrap()
                .1
                .close
        );
        assert!(
            head("GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
                .unwrap()
                .unwrap()
                .1
                .close
        );
        let err = |t: &str| head(t).err().map(|r| r.status);
        assert_eq!(
            err("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Some(501)
        );
        assert_eq!(
            err("GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n"),
            Some(400)
        );
        assert_eq!(err("\x01\x02 nonsense\r\n\r\n"), Some(400));
        let many: String = (0..40).map(|i| format!("X-{i}: y\r\n")).collect();
        assert_eq!(err(&format!("GET / HTTP/1.1\r\n{many}\r\n")), Some(431));
    }
}
