//! How every memlens command shows what it measured.
//!
//! * [`doc`]: the document every measuring command reports (verdict, notes, tables, plots), rendered
//!   for the terminal (fitted to its width) and as HTML; the missing-value marks.
//! * [`output`]: tables, JSON and CSV writers (`--json`, `--csv`, the machine facts beside them).
//! * [`plot`]: SVG charts; [`html`]: what every self-contained page needs (escaping, embedded data).
//! * [`progress`]: progress bars on stderr (hidden when stderr is not a terminal).
#![warn(missing_docs)]
pub mod doc;
pub mod html;
pub mod output;
pub mod plot;
pub mod progress;
