//! The secrets a cloud credential source holds or has handed out (a service account's key
//! lines, a client secret; each token and temporary key it fetched), so that the redactor of a
//! call made with it cuts them wherever an upstream echoes them (`adapter::redact`).
//!
//! A source notes a value before the value is used, so a call's redactor, which reads them once
//! the call has an error, always finds what that call sent. Rotating values are kept a while
//! after they are replaced ([`RECENT`]), for calls still answering with the one before. Values
//! are never logged or shown; nothing but the redactor reads them.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Mutex;

use serde_json::Value;

/// Rotating values kept: a token is replaced about hourly, a stream lasts minutes.
pub const RECENT: usize = 16;

/// The fields of a credentials file that are secret: a service account's key (each of its
/// lines), an authorized user's client secret and refresh token.
const SECRET_FIELDS: [&str; 3] = ["private_key", "client_secret", "refresh_token"];

/// What one credential source holds and has handed out.
#[derive(Default)]
pub struct Held(Mutex<Kept>);

#[derive(Default)]
struct Kept {
    /// For the source's life: key lines, client secrets.
    fixed: Vec<String>,
    /// The last [`RECENT`] tokens and temporary keys, newest last.
    recent: VecDeque<String>,
}

impl Held {
    /// Keep `value` for the source's life.
    pub(in crate::adapter) fn hold(&self, value: &str) {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !value.is_empty() && !kept.fixed.iter().any(|v| v == value) {
            kept.fixed.push(value.to_string());
        }
    }

    /// Keep `value` among the recent ones (a token, a temporary key), the oldest let go.
    pub(in crate::adapter) fn note(&self, value: &str) {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if value.is_empty() || kept.recent.back().is_some_and(|v| v == value) {
            return;
        }
        kept.recent.retain(|v| v != value);
        if kept.recent.len() == RECENT {
            kept.recent.pop_front();
        }
        kept.recent.push_back(value.to_string());
    }

    /// Keep the secret fields of the credentials file at `path` (a service account's key line
    /// by line, its markers left out); a file that cannot be read or parsed adds nothing (the
    /// credential's own error says why).
    pub(in crate::adapter) fn hold_file(&self, path: &Path) {
        let Ok(text) = std::fs::read_to_string(path) else { return };
        let Ok(file) = serde_json::from_str::<Value>(&text) else { return };
        for field in SECRET_FIELDS {
            let value = file.get(field).and_then(Value::as_str).unwrap_or_default();
            for line in value.lines().map(str::trim).filter(|l| !l.starts_with("-----")) {
                self.hold(line);
            }
        }
    }

    /// Every value held, the source's own first.
    pub(in crate::adapter) fn values(&self) -> Vec<String> {
        let kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        kept.fixed.iter().chain(&kept.recent).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_values_are_bounded_and_held_ones_stay() {
        let held = Held::default();
        held.hold("client-secret-0123");
        held.hold("client-secret-0123");
        for n in 0..RECENT + 2 {
            held.note(&format!("token-{n:04}"));
            held.note(&format!("token-{n:04}"));
        }
        let values = held.values();
        assert_eq!(values.len(), 1 + RECENT, "{values:?}");
        assert_eq!(values[0], "client-secret-0123");
        assert_eq!(values[1], "token-0002", "the two oldest tokens were let go");
        assert_eq!(values.last().map(String::as_str), Some("token-0017"));
        held.note("token-0005");
        assert_eq!(held.values().last().map(String::as_str), Some("token-0005"), "noted again: newest");
        assert_eq!(held.values().len(), 1 + RECENT);
    }

    #[test]
    fn a_credentials_file_holds_its_key_lines_and_secrets() {
        let dir = std::env::temp_dir().join(format!("spillway-held-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("account.json");
        let key = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----\n";
        let file =
            serde_json::json!({"type": "service_account", "private_key": key, "client_email": "a@b.c"});
        std::fs::write(&path, file.to_string()).unwrap();
        let held = Held::default();
        held.hold_file(&path);
        held.hold_file(&dir.join("missing.json"));
        assert_eq!(held.values(), ["MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "BKcwggSjAgEAAoIBAQC7"]);
        let user = serde_json::json!({"type": "authorized_user", "client_secret": "d-FL95Q19q7MQmFpd7hHD0Ty", "refresh_token": "1//0refresh-token-value"});
        std::fs::write(&path, user.to_string()).unwrap();
        held.hold_file(&path);
        assert_eq!(held.values().len(), 4);
        let _ = std::fs::remove_dir_all(dir);
    }
}
