//! The secrets a config names, read from the environment once at start (and on reload): client
//! keys, provider API keys, the Redis and ledger URLs, the admin token. Only environment
//! variable names are ever in the config.

use std::collections::HashMap;

use super::Config;

/// Secrets read from the environment: client keys (value → env name) and API keys by backend.
#[derive(Default)]
pub struct Secrets {
    pub client_keys: HashMap<String, String>,
    pub backend_keys: HashMap<String, String>,
    /// `state.redis_url`, or the value of `state.redis_url_env`.
    pub redis_url: Option<String>,
    /// Where the cost ledger goes; `None`: no ledger.
    pub ledger_url: Option<String>,
    /// The admin API's bearer token; `None`: no admin API.
    pub admin_token: Option<String>,
}

/// Read every environment variable the config names; each one missing is a problem.
pub fn read_secrets(config: &Config, env: impl Fn(&str) -> Option<String>) -> Result<Secrets, Vec<String>> {
    let mut missing = Vec::new();
    let mut client_keys = HashMap::new();
    for name in &config.client_keys_env {
        match env(name).filter(|v| !v.trim().is_empty()) {
            Some(value) => {
                client_keys.insert(value.trim().to_string(), name.clone());
            }
            None => missing.push(format!("client_keys_env: environment variable {name} is not set")),
        }
    }
    let mut backend_keys = HashMap::new();
    for b in &config.backends {
        if let Some(name) = &b.api_key_env {
            match env(name).filter(|v| !v.trim().is_empty()) {
                Some(value) => {
                    backend_keys.insert(b.name.clone(), value.trim().to_string());
                }
                None => missing.push(format!("backend {}: environment variable {name} is not set", b.name)),
            }
        }
    }
    let ledger_url = match config.ledger.enabled.then(|| config.ledger.resolve_url(&env)) {
        None => None,
        Some(Ok(url)) => Some(url),
        Some(Err(why)) => {
            missing.push(why);
            None
        }
    };
    let mut from_env = |key: &str, name: &str| {
        let value = env(name).filter(|v| !v.trim().is_empty()).map(|v| v.trim().to_string());
        if value.is_none() {
            missing.push(format!("{key}: environment variable {name} is not set"));
        }
        value
    };
    let redis_url = match (&config.state.redis_url, &config.state.redis_url_env) {
        (Some(url), _) => Some(url.clone()),
        (None, Some(name)) => from_env("state.redis_url_env", name),
        (None, None) => None,
    };
    let admin_token = config.admin_token_env.as_deref().and_then(|name| from_env("admin_token_env", name));
    if missing.is_empty() {
        Ok(Secrets { client_keys, backend_keys, redis_url, ledger_url, admin_token })
    } else {
        Err(missing)
    }
}
