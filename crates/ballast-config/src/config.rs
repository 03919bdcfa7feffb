//! A loaded configuration: the model, its source text and where each key is.

use crate::error::ConfigError;
use crate::finding::{Finding, KeyFinding};
use crate::model::{File, System};
use crate::source::{Source, SpanIndex};

/// A configuration file that parsed, with every key known and every value of
/// the right type. Whether it *obeys the rules* is [`Config::lint`]'s
/// question; what the runtime is built from ([`Config::policy_builder`],
/// [`Config::http_settings`], [`Config::queue`]) is only handed out for a
/// section that lints without errors.
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

    /// The directory paths in the file are taken from: the file's own
    /// (the working directory for a file named without one).
    pub fn dir(&self) -> std::path::PathBuf {
        std::path::Path::new(self.source.name())
            .parent()
            .map(std::path::Path::to_path_buf)
            .unwrap_or_default()
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

impl Config {
    /// The idempotency header of system `name` (default `Idempotency-Key`).
    pub fn idempotency_header(&self, name: &str) -> String {
        self.system(name)
            .and_then(|s| s.idempotency_header.clone())
            .unwrap_or_else(|| ballast_vocab::http::DEFAULT_IDEMPOTENCY_HEADER.to_owned())
    }

    /// Checks system `name`'s routes against its OpenAPI document `doc`
    /// (see [`openapi::Document::check`](crate::openapi::Document::check)):
    /// findings about the configuration are located in it, findings about
    /// the document at the operation's line there.
    pub fn check_openapi(&self, name: &str, doc: &crate::openapi::Document) -> Vec<crate::Finding> {
        let Some(system) = self.system(name) else { return Vec::new() };
        let routes = crate::systems::translate::translate(name, system).routes;
        let located: Vec<_> = routes
            .iter()
            .map(|route| {
                // The key as the file wrote it, to find its place.
                let key = system.routes.iter().flatten().map(|(k, _)| k).find(|k| {
                    k.trim().split_once(' ').is_some_and(|(m, t)| {
                        ballast_vocab::http::routes::Route::new(m, t.trim(), route.kind())
                            .is_ok_and(|r| r.name() == route.name())
                    })
                });
                let at = key.and_then(|k| {
                    let path = crate::finding::system_path(name, &["routes", k]);
                    self.index.span(&path).map(|span| self.source.location(span.start))
                });
                (route.clone(), at)
            })
            .collect();
        doc.check(self.source.name(), &located, &self.idempotency_header(name))
    }
}

impl Config {
    /// Checks the fleet's settings against the fleet that ran on the
    /// configuration's queue database: a breaker held by the fleet
    /// (`scope = "fleet"`) whose `quorum` is above `replicas`, the most
    /// replicas that ran at once lately, can never open for the fleet — a
    /// warning at its `quorum` (or its `scope`, when the default quorum is
    /// too many).
    pub fn check_fleet(&self, replicas: u32, lately: &str) -> Vec<Finding> {
        let mut found = Vec::new();
        for (name, system) in &self.file.systems {
            let Some(breaker) = system.breaker.as_ref().and_then(crate::model::Part::section) else {
                continue;
            };
            if breaker.scope.as_deref() != Some("fleet") {
                continue;
            }
            let quorum = breaker.quorum.unwrap_or(crate::systems::translate::DEFAULT_QUORUM);
            if quorum <= u64::from(replicas) {
                continue;
            }
            let key = if breaker.quorum.is_some() { "quorum" } else { "scope" };
            let path = crate::finding::system_path(name, &["breaker", key]);
            let span = self.index.span(&path);
            let (severity, message, help) = if replicas == 0 {
                (
                    ballast::Severity::Note,
                    format!(
                        "no replica ran on this database {lately}: the fleet's breaker of {name:?} (quorum \
                         {quorum}) is not checked against the replicas"
                    ),
                    "lint again once the fleet runs".to_owned(),
                )
            } else {
                (
                    ballast::Severity::Warning,
                    format!(
                        "the fleet's breaker of {name:?} opens once {quorum} replicas see it failing, but at most \
                         {replicas} ran at once {lately}: it can never open for the fleet, and each replica keeps \
                         calling a system the others see down"
                    ),
                    format!(
                        "set quorum to at most {replicas} (a majority of {replicas} is {}), or run more replicas",
                        replicas / 2 + 1
                    ),
                )
            };
            found.push(crate::finding::spanned(&self.source, None, severity, span, message, help));
        }
        found
    }

    /// `Err` with the errors among `problems` of `section`, if any.
    pub(crate) fn refuse(&self, section: &str, problems: Vec<KeyFinding>) -> Result<(), ConfigError> {
        let errors: Vec<Finding> = problems
            .into_iter()
            .filter(|p| p.severity == ballast::Severity::Error)
            .map(|p| p.locate(&self.source, &self.index))
            .collect();
        if errors.is_empty() {
            return Ok(());
        }
        let file = self.source.name().to_owned();
        Err(ConfigError::Refused { section: section.to_owned(), file, findings: errors })
    }
}
