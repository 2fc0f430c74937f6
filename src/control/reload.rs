//! Config reload without dropping a request: on `SIGHUP` or `POST /admin/reload`, read the
//! config file again, check it whole (a bad file changes nothing and says why), read the
//! secrets it names, then swap in what a running router can take at once: backends, tasks,
//! policy, prices, quotas, pins, client and provider keys, SLO targets. Requests in flight keep
//! the snapshot they started with; the next snapshot (within 100 ms) uses the new config.
//!
//! Settings that shape long-lived parts (listen address, dispatch and breaker settings,
//! limits, telemetry, shared state, ledger, canary interval, balancing gains, admin token) are
//! reported as needing a restart instead of being half-applied.

use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::Serialize;

use super::balancing::AvailabilityBoard;
use crate::config::Config;
use crate::dispatch::Dispatcher;
use crate::guard::quota::QuotaBoard;
use crate::metrics::Metrics;

/// Everything a reload swaps.
pub struct Reloader {
    pub config: Arc<ArcSwap<Config>>,
    /// Static client keys are swapped here; issued keys come from the store, not the config.
    pub client_keys: Arc<crate::keys::KeyBoard>,
    pub dispatcher: Arc<Dispatcher>,
    pub quota: Arc<QuotaBoard>,
    /// Key limits and budgets: a reload takes the new ones, spend so far is kept.
    pub budgets: Arc<crate::guard::budget::BudgetBoard>,
    pub availability: Arc<AvailabilityBoard>,
    pub metrics: Arc<Metrics>,
}

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reloaded {
    pub source: String,
    pub backends: Vec<String>,
    pub tasks: Vec<String>,
    /// Keys that changed but take effect only after a restart.
    pub restart_needed: Vec<&'static str>,
}

/// Top-level settings a running router cannot take over, and whether they differ.
pub fn restart_needed(old: &Config, new: &Config) -> Vec<&'static str> {
    let changed = [
        ("listen", old.listen != new.listen),
        ("dispatch", old.dispatch != new.dispatch),
        ("limits", old.limits != new.limits),
        ("telemetry", old.telemetry != new.telemetry),
        ("state", old.state != new.state),
        ("ledger", old.ledger != new.ledger),
        ("canary", old.canary != new.canary),
        ("balancing", old.balancing != new.balancing),
        ("admin_token_env", old.admin_token_env != new.admin_token_env),
        ("issued_keys", old.issued_keys != new.issued_keys),
    ];
    changed.into_iter().filter(|(_, c)| *c).map(|(k, _)| k).collect()
}

impl Reloader {
    /// Read the config file again and apply it; on any problem nothing changes and the
    /// problems come back, one line each.
    pub fn reload(&self, env: impl Fn(&str) -> Option<String>) -> Result<Reloaded, Vec<String>> {
        let old = self.config.load_full();
        let Some(path) = old.source.clone() else {
            return Err(vec!["this router was not started from a config file: nothing to reload".into()]);
        };
        let new = crate::config::load_file(&path).map_err(|problems| {
            problems.iter().map(|p| format!("{}: {p}", path.display())).collect::<Vec<_>>()
        })?;
        let secrets = crate::config::secrets::read_secrets(&new, env)?;
        let restart = restart_needed(&old, &new);
        // The redactor learns the new keys before any of them is in use.
        self.dispatcher.set_secrets(crate::dispatch::Keys {
            api_keys: secrets.backend_keys,
            client_keys: secrets.client_keys.keys().cloned().collect(),
            admin_token: secrets.admin_token,
        });
        self.client_keys.set_static(crate::keys::StaticKeys::new(&secrets.client_keys));
        self.quota.set_limits(&new);
        self.budgets.set_config(&new.budgets);
        self.availability.track_new(&new);
        self.metrics.configure(&new);
        let reloaded = Reloaded {
            source: path.display().to_string(),
            backends: new.backends.iter().map(|b| b.name.clone()).collect(),
            tasks: new.tasks.iter().map(|t| t.name.clone()).collect(),
            restart_needed: restart,
        };
        self.config.store(Arc::new(new));
        Ok(reloaded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_of_long_lived_parts_need_a_restart() {
        let base = "backends: [{name: a, kind: openai, model: m}]\ntasks: [{name: t, backends: [a], slo: {ttft_ms: 500}}]\n";
        let old = crate::config::parse(base).unwrap();
        let same_shape = crate::config::parse(&base.replace("ttft_ms: 500", "ttft_ms: 900")).unwrap();
        assert!(restart_needed(&old, &same_shape).is_empty(), "tasks reload in place");
        let moved =
            crate::config::parse(&format!("{base}listen: 0.0.0.0:9000\ncanary: {{interval_secs: 60}}\n"))
                .unwrap();
        assert_eq!(restart_needed(&old, &moved), ["listen", "canary"]);
    }
}
