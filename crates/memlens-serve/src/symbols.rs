//! `/debug/pprof/symbol`, answered as Go's `net/http/pprof` answers it: `GET` says whether symbols
//! are available (`num_symbols: 1`), `POST` (or a `GET` with a query) of addresses joined by `+`
//! gets one `0xADDR name` line per address it can name, and nothing for the others.
//!
//! Our profiles never need it (every location has a function), but a pprof client may still ask;
//! addresses are named from the last profile served of each process (an address only ever means
//! something in one process: it is named when the processes that know it agree on its name).
use memlens_profile::Profile;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Address → function name of the last profile served, per process.
#[derive(Default)]
pub struct Symbols {
    tables: Mutex<HashMap<i32, Arc<HashMap<u64, String>>>>,
}

impl Symbols {
    /// Remember the names of `p`'s locations (innermost function, as Go's `FuncForPC`).
    pub fn remember(&self, pid: i32, p: &Profile) {
        let table: HashMap<u64, String> = p
            .locations
            .iter()
            .filter_map(|l| {
                let f = p
                    .functions
                    .get((l.lines.first()?.function as usize).wrapping_sub(1))?;
                Some((l.address, f.name.clone()))
            })
            .collect();
        let mut t = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        t.retain(|p, _| std::path::Path::new(&format!("/proc/{p}")).exists());
        t.insert(pid, Arc::new(table));
    }

    /// The reply to a symbol request whose addresses are `query` (`0x1234+0x5678`; empty for the
    /// count only).
    pub fn answer(&self, query: &str) -> String {
        let tables: Vec<Arc<HashMap<u64, String>>> = self
            .tables
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        let mut out = String::from("num_symbols: 1\n");
        for word in query.split('+') {
            let Some(addr) = parse_addr(word.trim()) else {
                continue;
            };
            let mut names = tables.iter().filter_map(|t| t.get(&addr));
            if let Some(first) = names.next() {
                if names.all(|n| n == first) {
                    out += &format!("{addr:#x} {first}\n");
                }
            }
        }
        out
    }
}

/// An address as Go's `strconv.ParseUint(s, 0, 64)` reads it (0x hex, 0 octal, else decimal);
/// zero is no address.
fn parse_addr(s: &str) -> Option<u64> {
    let v = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()?
    } else if s.len() > 1 && s.starts_with('0') {
        u64::from_str_radix(&s[1..], 8).ok()?
    } else {
        s.parse().ok()?
    };
    (v != 0).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use memlens_profile::{Function, Line, Location};

    fn profile(addr: u64, name: &str) -> Profile {
        Profile {
            functions: vec![Function {
                name: name.into(),
                ..Function::default()
            }],
            locations: vec![Location {
                mapping: 0,
                address: addr,
                lines: vec![Line {
                    function: 1,
                    line: 0,
                }],
            }],
            ..Profile::default()
        }
    }

    #[test]
    fn named_as_go_names_them() {
        let s = Symbols::default();
        assert_eq!(s.answer(""), "num_symbols: 1\n");
        let me = std::process::id() as i32;
        s.remember(me, &profile(0x4010, "main"));
        assert_eq!(
            s.answer("0x4010+0x9999+junk+16400"),
            "num_symbols: 1\n0x4010 main\n0x4010 main\n"
        );
        assert_eq!(parse_addr("010"), Some(8));
        assert_eq!(parse_addr("0"), None);
    }
}
