//! The `limits:` and `issued_keys:` sections: what one request and one client connection may
//! take of the router, how long shutdown waits, and how often issued client keys are read
//! again. Only what the operator writes, its defaults and its ranges; `api` and `server`
//! enforce them.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::range::{self, Range, Says};
use super::Problem;

/// Protection of the router itself: what one request and one client connection may take.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Largest request body accepted (bytes); larger gets 413.
    pub max_body_bytes: usize,
    /// Most requests in flight at once; beyond it clients get 429 with `Retry-After`. A request
    /// takes its permit only once its body is in, so a slow sender never holds one.
    pub max_concurrency: usize,
    /// A request's headers must arrive within this long of their first byte, or the connection
    /// is closed.
    pub header_read_timeout_ms: u64,
    /// A request's body must arrive within this long of its headers, or the client gets 408.
    pub body_read_timeout_ms: u64,
    /// A kept-alive client connection with no request for this long is closed.
    pub idle_timeout_ms: u64,
    /// A Responses WebSocket (Codex's first choice) with no message for this long is closed
    /// (default an hour, as OpenAI's own; a coding session idles between turns).
    pub websocket_idle_timeout_ms: u64,
    /// Largest request head (request line and headers, bytes); larger gets 431.
    pub max_header_bytes: usize,
    /// Most header fields in one request; more gets 431.
    pub max_headers: usize,
    /// Most open connections from one client address; 0: no limit. Connections over it are
    /// closed as soon as they are accepted.
    pub max_connections_per_client: usize,
    /// After SIGTERM (or ctrl-c): how long the router keeps accepting and serving new requests,
    /// with `/readyz` answering 503, before it stops accepting and drains (0 to 300000 ms).
    /// Kubernetes keeps sending new connections to a terminating pod for a few seconds; a
    /// second signal skips the rest of the delay.
    pub shutdown_delay_ms: u64,
    /// After the shutdown delay: how long requests in flight (streams included) may take to finish before
    /// every connection still open is closed and the ledger is flushed.
    pub drain_timeout_ms: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_body_bytes: 1 << 20,
            max_concurrency: 1024,
            header_read_timeout_ms: 5_000,
            body_read_timeout_ms: 30_000,
            idle_timeout_ms: 75_000,
            websocket_idle_timeout_ms: 3_600_000,
            max_header_bytes: 32 << 10,
            max_headers: 100,
            max_connections_per_client: 0,
            shutdown_delay_ms: 5_000,
            drain_timeout_ms: 25_000,
        }
    }
}

impl LimitsConfig {
    /// The ranges of the section's numbers (keys below `limits`).
    pub const RANGES: &'static [Range] = &[
        Range::at_least("max_concurrency", 1.0),
        Range::at_least("max_body_bytes", 1024.0),
        Range::at_least("header_read_timeout_ms", 1.0),
        Range::at_least("body_read_timeout_ms", 1.0),
        Range::at_least("idle_timeout_ms", 1.0),
        Range::at_least("websocket_idle_timeout_ms", 1.0),
        // hyper's HTTP/1 parser needs room for at least one 8 KiB read.
        Range::at_least("max_header_bytes", 8192.0),
        Range::new("shutdown_delay_ms", range::Bound::Open, range::Bound::Incl(300_000.0))
            .note(" (5 minutes)"),
        Range::at_least("max_headers", 1.0),
    ];

    pub fn check(&self) -> Vec<Problem> {
        let values = [
            ("max_concurrency", self.max_concurrency as f64),
            ("max_body_bytes", self.max_body_bytes as f64),
            ("header_read_timeout_ms", self.header_read_timeout_ms as f64),
            ("body_read_timeout_ms", self.body_read_timeout_ms as f64),
            ("idle_timeout_ms", self.idle_timeout_ms as f64),
            ("websocket_idle_timeout_ms", self.websocket_idle_timeout_ms as f64),
            ("max_header_bytes", self.max_header_bytes as f64),
            ("shutdown_delay_ms", self.shutdown_delay_ms as f64),
            ("max_headers", self.max_headers as f64),
        ];
        range::check("limits", Self::RANGES, &values)
    }

    pub fn header_read_timeout(&self) -> Duration {
        Duration::from_millis(self.header_read_timeout_ms)
    }

    pub fn body_read_timeout(&self) -> Duration {
        Duration::from_millis(self.body_read_timeout_ms)
    }

    pub fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.idle_timeout_ms)
    }

    pub fn websocket_idle_timeout(&self) -> Duration {
        Duration::from_millis(self.websocket_idle_timeout_ms)
    }

    pub fn shutdown_delay(&self) -> Duration {
        Duration::from_millis(self.shutdown_delay_ms)
    }

    pub fn drain_timeout(&self) -> Duration {
        Duration::from_millis(self.drain_timeout_ms)
    }
}

/// Client keys issued through `spillway keys` or `/admin/keys`, kept in the ledger store.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct IssuedKeysConfig {
    /// How often a router reads the issued keys from the store again (100 to 5000 ms), so a
    /// key revoked through any replica is refused by every replica within this time.
    pub refresh_ms: u64,
}

impl Default for IssuedKeysConfig {
    fn default() -> Self {
        IssuedKeysConfig { refresh_ms: 2_000 }
    }
}

impl IssuedKeysConfig {
    /// The ranges of the section's numbers (keys below `issued_keys`).
    pub const RANGES: &'static [Range] = &[Range::between("refresh_ms", 100.0, 5_000.0)
        .says(Says::OutOfRange)
        .note(" (a revocation must reach every replica within 5 s)")];

    pub fn check(&self) -> Vec<Problem> {
        range::check("issued_keys", Self::RANGES, &[("refresh_ms", self.refresh_ms as f64)])
    }

    pub fn refresh(&self) -> Duration {
        Duration::from_millis(self.refresh_ms)
    }
}
