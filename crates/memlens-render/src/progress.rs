//! Progress on stderr for long runs: a bar with the time left, hidden when stderr is not a terminal
//! (indicatif hides itself then), with the current step's name last, cut to the terminal's width
//! (a long step name never wraps the bar onto a second line). Step names are for a person: what
//! runs, in words (`pipeline-llc · memlens fp · process 1 of 3`), never a value's debug form.
use indicatif::{ProgressBar, ProgressStyle};

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub struct Progress(ProgressBar);

impl Progress {
    /// A bar over `total` steps.
    pub fn new(total: u64, what: &str) -> Progress {
        let pb = ProgressBar::new(total);
        pb.set_style(
            ProgressStyle::with_template("{prefix} [{bar:20}] {pos}/{len} eta {eta} {wide_msg}")
                .unwrap()
                .progress_chars("=> "),
        );
        pb.set_prefix(what.to_string());
        Progress(pb)
    }

    /// Name the step now running.
    pub fn step(&self, msg: impl Into<String>) {
        self.0.set_message(msg.into());
    }

    /// One step done.
    pub fn inc(&self) {
        self.0.inc(1);
    }

    /// Print a line above the bar without garbling it.
    pub fn println(&self, line: impl AsRef<str>) {
        self.0.suspend(|| eprintln!("{}", line.as_ref()));
    }

    /// Remove the bar.
    pub fn finish(&self) {
        self.0.finish_and_clear();
    }
}
