//! A loaded configuration: the model, its source text and where each key is.

use crate::model::{File, System};
use crate::source::{Source, SpanIndex};

/// A configuration file that parsed, with every key known and every value of
/// the right type. Whether it *obeys the rules* is [`Config::lint`]'s
/// question; the runtime objects ([`Config::policy`], [`Config::queue`]) are
/// only built from a system that lints without errors.
#[derive(Debug, Clone)]
pub struct Config {
    pub(crate) source: Source,
    pub(crate) index: SpanIndex,
    pub(crate) file: File,
    /// Keys set aside by [`Config::check`] for having the wrong type; rule
    /// findings about them are left out (their type error says it). Empty
    /// for every `Config` handed out.
    pub(crate) dropped: Vec<Vec<String>>,
}

impl Config {
    /// The parsed model.
    pub fn model(&self) -> &File {
        &self.file
    }

    /// The file's name and text.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The names of the systems, in order.
    pub fn system_names(&self) -> impl Iterator<Item = &str> {
        self.file.systems.keys().map(String::as_str)
    }

    /// One system's section, if declared.
    pub fn system(&self, name: &str) -> Option<&System> {
        self.file.systems.get(name)
    }
}
