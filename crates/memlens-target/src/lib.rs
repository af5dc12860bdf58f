//! A process running the memlens runtime — a *target* — seen from outside: where its control
//! socket is, the client that talks to it, what `/proc` says of it, and the dumps it writes.
//!
//! Used by every command that works on such a process: `memlens ctl`, `memlens run` (its watcher
//! and the dumps it converts), `memlens attach`/`detach`, `memlens serve` and `memlens study`.
//!
//! * `socket.rs`: the control directory and the socket's name in it (`<pid>.<pidns>.sock`), as
//!   reached from here (under `/proc/PID/root` for a process in a container), and connecting.
//! * `ns.rs`: where a process lives: its pid in its own namespace, its root, its uid inside its
//!   user namespace, the container and pod its cgroup names ([`Container`]).
//! * `discover.rs`: every process with a control socket, in any namespace, by host pid
//!   ([`socket_hosts`]).
//! * `client.rs`: [`Target`], one request line and one reply line over that socket.
//! * `reply.rs`: that reply parsed into typed fields ([`Reply`]), the only reader of its words.
//! * `proc.rs`: `/proc/PID` facts: [`ProcStatus`], [`rss_bytes`], whether the runtime is mapped.
//! * `interval.rs`: the sampling interval the runtime accepts ([`parse_interval`]).
//! * `dumps.rs`: the raw dumps the runtime writes (`<prefix>.<pid>.<seq>.raw`) and default names.
#![warn(missing_docs)]
mod client;
mod discover;
mod dumps;
mod interval;
mod ns;
mod proc;
mod reply;
mod socket;

pub use client::{set_socket_opener, Target};
pub use discover::socket_hosts;
pub use dumps::{default_dump_name, raw_dumps, Dump};
pub use interval::parse_interval;
pub use ns::{foreign_root, ns_inode, Container};
pub use proc::{is_runtime_path, parse_pid, rss_bytes, runtime_loaded, ProcStatus};
pub use reply::{Reply, ReplyError};
pub use socket::{ctl_dir, ctl_dir_given, remove_stale_sockets, socket_pids};
