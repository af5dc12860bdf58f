//! What a check found (`Outcome`): the one value the text (show.rs), JSON and JUnit (machine.rs)
//! outputs are written from. It stands below lib.rs, which builds it, so the outputs need nothing
//! of the runner.
use crate::figures::Figures;
use crate::judge::Judged;
use std::path::PathBuf;

/// What a check found, for the text, JSON and JUnit outputs.
pub(crate) struct Outcome<'a> {
    /// The command line checked.
    pub command: Vec<String>,
    /// How the program ended (`exit 0`, `SIGSEGV`).
    pub ending: String,
    /// Its exit code as a shell reports it.
    pub exit_code: i32,
    /// How it failed, when it did.
    pub program_failed: Option<String>,
    /// The sampling interval.
    pub interval: u64,
    /// Why it was chosen, when it was not given.
    pub interval_why: Option<String>,
    /// Every limit on every process it applies to.
    pub judged: Vec<Judged<'a>>,
    /// The processes' figures.
    pub procs: &'a [Figures],
    /// Profiles kept.
    pub kept: Vec<PathBuf>,
    /// `--strict`.
    pub strict: bool,
    /// The exit status.
    pub status: i32,
    /// What the reader should know.
    pub notes: Vec<String>,
    /// How long the run took.
    pub seconds: f64,
}
