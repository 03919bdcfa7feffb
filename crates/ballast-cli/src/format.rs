//! `--format`: output for people or for scripts, shared by every subcommand
//! that reports.

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// For people: findings like a compiler's (the source line, a caret under
    /// the value at fault), aligned tables and sentences.
    Human,
    /// One JSON value on stdout, for scripts and CI.
    Json,
}
