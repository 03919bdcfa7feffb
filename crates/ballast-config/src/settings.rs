//! What the runtime is built from: each section's settings, handed out
//! only for a section that lints without errors, with the defaults of what
//! the file leaves out.
//!
//! This is the layer above the sections: it reads the whole file (one
//! section's settings may take a key of another, as a system's client takes
//! `[queue] seal_key_env` and `[gateway] max_answer`), so it may name the
//! model; no section names it or this. Nothing here runs: headers taken from
//! the environment and the seal key are named, not read, and a policy is
//! handed out as its builder — the composition root
//! (`ballast_server::build::policy`) builds the running policy from it.

use std::time::Duration;

use ballast::{PolicyBuilder, Severity};
use ballast_vocab::http::RetryOn;

use crate::alerts::{AlertFormat, WebhookSettings};
use crate::config::Config;
use crate::error::ConfigError;
use crate::finding::Finding;
use crate::gateway::GatewaySettings;
use crate::listener::count;
use crate::queue::QueueSettings;
use crate::serve::ServeSettings;
use crate::suggest::did_you_mean;
use crate::systems::http::HttpSettings;
use crate::systems::translate::translate;
use crate::telemetry::{with_traces_path, Sampler, SpanPipeline, TelemetrySettings};

impl Config {
    /// The admin listener's settings: `[serve]` over [`ServeSettings::default`].
    /// Refused when `[serve]` has lint errors.
    pub fn serve(&self) -> Result<ServeSettings, ConfigError> {
        let defaults = ServeSettings::default();
        let Some(serve) = &self.file.serve else { return Ok(defaults) };
        self.refuse("serve", crate::serve::rules(serve))?;
        Ok(ServeSettings {
            listener: serve.listener().settings(defaults.listener, &self.dir(), None),
            protect_metrics: serve.protect_metrics.unwrap_or(false),
            stats_interval: serve.stats_interval.map_or(defaults.stats_interval, |d| d.get()),
            session_ttl: serve.session_ttl.map_or(defaults.session_ttl, |d| d.get()),
            drain_delay: serve.drain_delay.map_or(defaults.drain_delay, |d| d.get()),
            drain_timeout: serve.drain_timeout.map_or(defaults.drain_timeout, |d| d.get()),
        })
    }

    /// The gateway's settings, `None` without a `[gateway]` section: `[gateway]`
    /// over [`GatewaySettings::default`]. Refused when it has lint errors.
    pub fn gateway(&self) -> Result<Option<GatewaySettings>, ConfigError> {
        let Some(gateway) = &self.file.gateway else { return Ok(None) };
        self.refuse("gateway", crate::gateway::rules(gateway))?;
        let defaults = GatewaySettings::default();
        let serve_tls = self.file.serve.as_ref().and_then(|serve| serve.listener().tls_files(&self.dir()));
        let listener = gateway.listener().settings(defaults.listener, &self.dir(), serve_tls);
        let bytes = |size: Option<crate::size::ConfigSize>, default: usize| {
            size.map_or(default, |b| usize::try_from(b.bytes()).unwrap_or(usize::MAX))
        };
        Ok(Some(GatewaySettings {
            max_body: bytes(gateway.max_body, defaults.max_body),
            trust_forwarded: gateway.trust_forwarded.unwrap_or(false),
            // Half the connections at most, unless set: a waiting caller holds one.
            max_waiters: count(gateway.max_waiters)
                .unwrap_or_else(|| defaults.max_waiters.min(listener.max_connections / 2).max(1)),
            callback_hosts: gateway.callback_hosts.clone().unwrap_or_default(),
            callback_secret_env: gateway.callback_secret_env.clone(),
            workers: count(gateway.workers),
            buffer_answer: bytes(gateway.buffer_answer, defaults.buffer_answer),
            listener,
        }))
    }

    /// The durable queue's settings. Refused when `[queue]` has lint errors.
    pub fn queue(&self) -> Result<QueueSettings, ConfigError> {
        let file = self.source.name().to_owned();
        let queue = self.file.queue.as_ref().ok_or_else(|| ConfigError::NoQueue { file: file.clone() })?;
        let (periodic_findings, periodic) = crate::periodic::check(
            queue.periodic.as_ref(),
            &self.system_names().collect::<Vec<_>>(),
            &queue.schedule(),
            queue.retained(),
        );
        let errors: Vec<Finding> = crate::queue::rules(queue)
            .into_iter()
            .chain(periodic_findings)
            .filter(|p| p.severity == Severity::Error)
            .map(|p| p.locate(&self.source, &self.index))
            .collect();
        if !errors.is_empty() {
            return Err(ConfigError::Refused { section: "queue".into(), file, findings: errors });
        }
        Ok(QueueSettings {
            url: queue.url.clone().unwrap_or_default(),
            lease: queue.lease.map_or(ballast_vocab::queue::DEFAULT_LEASE, |d| d.get()),
            schedule: queue.schedule(),
            retain_completed: queue
                .retain_completed
                .map_or(ballast_vocab::queue::RETAIN_COMPLETED, |d| d.get()),
            retain_failed: queue.retain_failed.map_or(ballast_vocab::queue::RETAIN_FAILED, |d| d.get()),
            periodic,
        })
    }

    /// The alert webhooks of `[alerts]` (none without it). Refused when
    /// `[alerts]` has lint errors.
    pub fn alerts(&self) -> Result<Vec<WebhookSettings>, ConfigError> {
        let Some(alerts) = &self.file.alerts else { return Ok(Vec::new()) };
        self.refuse("alerts", crate::alerts::rules(alerts))?;
        let hooks = alerts.webhook.iter().flatten().map(|hook| {
            let format = match hook.format.as_deref() {
                Some("slack") => AlertFormat::Slack,
                Some("alertmanager") => AlertFormat::Alertmanager,
                _ => AlertFormat::Json,
            };
            WebhookSettings {
                url_env: hook.url_env.clone().unwrap_or_default(),
                format,
                dedupes_by_key: hook.dedupes_by_key.unwrap_or(format == AlertFormat::Alertmanager),
                timeout: hook.timeout.map_or(Duration::from_secs(5), |d| d.get()),
            }
        });
        Ok(hooks.collect())
    }

    /// `[telemetry]` over [`TelemetrySettings::default`]. Refused when the
    /// section has lint errors.
    ///
    /// ```
    /// use ballast_config::Config;
    ///
    /// let config = Config::parse("inline.toml", r#"
    ///     [telemetry]
    ///     endpoint = "http://otel-collector:4318"
    ///     sampler = "parentbased_traceidratio"
    ///     sampler_arg = 0.25
    /// "#).unwrap();
    /// let file = config.telemetry().unwrap();
    /// assert_eq!(file.traces_endpoint.as_deref(), Some("http://otel-collector:4318/v1/traces"));
    ///
    /// // The standard variables win over the file.
    /// let env = |var: &str| (var == "OTEL_TRACES_SAMPLER_ARG").then(|| "0.01".to_owned());
    /// let export = file.resolve(env).unwrap().export.unwrap();
    /// assert_eq!(export.spans.sampler.to_string(), "parentbased_traceidratio 0.01");
    /// ```
    pub fn telemetry(&self) -> Result<TelemetrySettings, ConfigError> {
        let Some(t) = &self.file.telemetry else { return Ok(TelemetrySettings::default()) };
        self.refuse("telemetry", crate::telemetry::rules(t))?;
        let traces_endpoint = match (&t.traces_endpoint, &t.endpoint) {
            (Some(url), _) => Some(url.clone()),
            (None, Some(base)) => Some(with_traces_path(base)),
            (None, None) => None,
        };
        let sampler = t.sampler.as_deref().and_then(|name| Sampler::named(name, t.sampler_arg));
        let defaults = SpanPipeline::default();
        Ok(TelemetrySettings {
            traces_endpoint,
            headers: t
                .headers
                .iter()
                .flatten()
                .map(|(name, source)| (name.clone(), source.env.clone().unwrap_or_default()))
                .collect(),
            spans: SpanPipeline {
                timeout: t.timeout.map_or(defaults.timeout, |d| d.get()),
                service_name: t.service_name.clone().unwrap_or(defaults.service_name),
                resource_attributes: t
                    .resource_attributes
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                sampler: sampler.unwrap_or(defaults.sampler),
                queue_size: t.queue_size.map_or(defaults.queue_size, |n| n as usize),
                batch_size: t.batch_size.map_or(defaults.batch_size, |n| n as usize),
                schedule_delay: t.schedule_delay.map_or(defaults.schedule_delay, |d| d.get()),
            },
        })
    }

    /// The policy builder of system `name`, for adding listeners or a seed
    /// before [`build`](PolicyBuilder::build). Refused when the system has
    /// lint errors; lint ran the core's own checks on it, so its `build`
    /// does not refuse.
    ///
    /// ```
    /// use ballast_config::Config;
    ///
    /// let config = Config::parse("inline.toml", r#"
    ///     [systems.sber.retry]
    ///     max_attempts = 3
    ///     [systems.sber.timeout]
    ///     attempt = "1s"
    /// "#).unwrap();
    /// let policy = config.policy_builder("sber").unwrap().build().unwrap();
    /// assert_eq!(policy.retry().max_attempts(), 3);
    /// ```
    pub fn policy_builder(&self, name: &str) -> Result<PolicyBuilder, ConfigError> {
        let system = self.system(name).ok_or_else(|| ConfigError::UnknownSystem {
            name: name.to_owned(),
            file: self.source.name().to_owned(),
            suggestion: did_you_mean(name, self.system_names()).map(str::to_owned),
        })?;
        let errors: Vec<Finding> = self.lint_system(name).into_iter().filter(Finding::is_error).collect();
        if !errors.is_empty() {
            return Err(ConfigError::Refused {
                section: format!("systems.{name}"),
                file: self.source.name().to_owned(),
                findings: errors,
            });
        }
        Ok(translate(name, system).builder)
    }

    /// The HTTP client system `name` declares. Refused when the system has
    /// lint errors or no `base_url`.
    ///
    /// ```
    /// use ballast_config::Config;
    ///
    /// let config = Config::parse("inline.toml", r#"
    ///     [systems.sber]
    ///     base_url = "http://127.0.0.1:8080"
    ///     dedupes_by_key = true
    ///     key_ttl = "24h"
    ///     critical = true
    ///     [systems.sber.retry]
    ///     max_attempts = 3
    ///     [systems.sber.timeout]
    ///     attempt = "1s"
    /// "#).unwrap();
    /// let sber = config.http_settings("sber").unwrap();
    /// assert!(sber.critical && sber.dedupes_by_key);
    /// assert_eq!(sber.base_url, "http://127.0.0.1:8080");
    /// ```
    pub fn http_settings(&self, name: &str) -> Result<HttpSettings, ConfigError> {
        let policy = self.policy_builder(name)?;
        let file = || self.source.name().to_owned();
        let system = self.system(name).ok_or_else(|| ConfigError::UnknownSystem {
            name: name.to_owned(),
            file: file(),
            suggestion: None,
        })?;
        let base_url = system
            .base_url
            .clone()
            .ok_or_else(|| ConfigError::NoBaseUrl { system: name.to_owned(), file: file() })?;
        // Checked with the policy above: refused had any route been wrong.
        let translated = translate(name, system);
        let retry_on = match system.retry.as_ref().and_then(|r| r.section()?.retry_on.as_ref()) {
            // Lint has already refused unknown names (with the same reading),
            // but a name the client does not know is never replaced by a default.
            Some(names) => Some(RetryOn::from_names(names).map_err(|source| ConfigError::RetryOn {
                system: name.to_owned(),
                file: file(),
                source,
            })?),
            None => None,
        };
        let queue = self.file.queue.as_ref();
        Ok(HttpSettings {
            name: name.to_owned(),
            policy,
            base_url,
            dedupes_by_key: system.dedupes_by_key.unwrap_or(false),
            critical: system.critical.unwrap_or(false),
            key_ttl: system.key_ttl.map(|ttl| ttl.get()),
            headers: system
                .headers
                .iter()
                .flatten()
                .map(|(header, source)| (header.clone(), source.env.clone().unwrap_or_default()))
                .collect(),
            routes: translated.routes,
            unrouted: translated.unrouted,
            idempotency_header: system.idempotency_header.clone(),
            retry_on,
            connect_timeout: system.timeout.as_ref().and_then(|t| t.connect).map(|d| d.get()),
            read_timeout: system.timeout.as_ref().and_then(|t| t.read).map(|d| d.get()),
            stream_timeout: system.timeout.as_ref().and_then(|t| t.stream).map(|d| d.get()),
            seal_key_env: queue.and_then(|q| q.seal_key_env.clone()),
            seal_headers: queue.and_then(|q| q.seal_headers.clone()).unwrap_or_default(),
            callback: system.callback.clone(),
            keep_answer: queue
                .and_then(|q| q.keep_answer)
                .map(|b| usize::try_from(b.bytes()).unwrap_or(usize::MAX)),
            seal_answers: queue.and_then(|q| q.seal_answers).unwrap_or(false),
            max_answer: self
                .file
                .gateway
                .as_ref()
                .and_then(|g| g.max_answer)
                .map(|b| usize::try_from(b.bytes()).unwrap_or(usize::MAX)),
            tenant_headers: self
                .file
                .gateway
                .as_ref()
                .and_then(|g| g.tenant_headers.clone())
                .unwrap_or_default(),
            connection: crate::systems::connection::settings(&self.dir(), system),
        })
    }

    /// Every system's HTTP client settings, ordered by name.
    pub fn http_settings_all(&self) -> Result<Vec<HttpSettings>, ConfigError> {
        self.system_names().map(|name| self.http_settings(name)).collect()
    }
}
