//! The immutable view of the world that planning reads.
//!
//! Control loops build a new [`Snapshot`] and swap it in whole; the request path only loads
//! the current one. It holds the config, every backend with its nodes (one node per endpoint),
//! and each node's breaker state as last published.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{BackendConfig, BackendKind, Config, Price};

/// A breaker's state as planning sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BreakerView {
    #[default]
    Closed,
    /// Failing: planning puts the node last; dispatch will not send to it.
    Open,
    /// One probe may go through.
    HalfOpen,
}

/// One place a request can be sent: a vLLM node, or a hosted backend's single endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeView {
    /// Stable identity across snapshots: `backend/model@endpoint`. Breakers and per-node
    /// limits are keyed by it.
    pub key: String,
    /// Base URL as the adapter wants it (OpenAI-compatible URLs end in `/v1`).
    pub base_url: String,
    /// The node's root address (`http://10.0.0.5:8000`): `/metrics`, `/health`, `/version`.
    pub origin: String,
    pub breaker: BreakerView,
}

/// A backend and its nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendView {
    pub name: String,
    pub kind: BackendKind,
    pub model: String,
    pub region: Option<String>,
    pub price: Option<Price>,
    /// Ask the upstream for a stream even when the client did not.
    pub stream_upstream: bool,
    /// Most requests in flight per node, if limited.
    pub max_inflight_per_node: Option<u32>,
    pub nodes: Vec<NodeView>,
}

impl BackendView {
    pub fn is_local(&self) -> bool {
        self.kind.is_local()
    }

    fn from_config(b: &BackendConfig) -> Self {
        let nodes = node_urls(b)
            .into_iter()
            .map(|(origin, base_url)| NodeView {
                key: format!("{}/{}@{}", b.name, b.model, base_url),
                base_url,
                origin,
                breaker: BreakerView::Closed,
            })
            .collect();
        BackendView {
            name: b.name.clone(),
            kind: b.kind,
            model: b.model.clone(),
            region: b.region.clone(),
            price: b.price.clone(),
            stream_upstream: b.stream_upstream,
            max_inflight_per_node: b.max_inflight_per_node,
            nodes,
        }
    }
}

/// (origin, adapter base URL) of each of a backend's configured nodes.
fn node_urls(b: &BackendConfig) -> Vec<(String, String)> {
    let trim = |u: &str| u.trim_end_matches('/').to_string();
    match b.kind {
        // vLLM nodes are listed as bare addresses; their OpenAI API lives under /v1.
        BackendKind::Vllm => b.endpoints.iter().map(|e| (trim(e), format!("{}/v1", trim(e)))).collect(),
        _ if !b.endpoints.is_empty() => b.endpoints.iter().map(|e| (trim(e), trim(e))).collect(),
        _ => b
            .base_url
            .as_deref()
            .or(b.kind.default_base_url())
            .map(|u| (trim(u), trim(u)))
            .into_iter()
            .collect(),
    }
}

/// Everything planning may read, frozen.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Increases with every published snapshot.
    pub version: u64,
    pub config: Arc<Config>,
    /// In config order; a task refers to them by name.
    pub backends: Vec<BackendView>,
    /// Backend name → index into `backends`.
    by_name: HashMap<String, usize>,
}

impl Snapshot {
    /// A first snapshot straight from config: every breaker closed.
    pub fn from_config(config: Arc<Config>) -> Snapshot {
        let backends: Vec<BackendView> = config.backends.iter().map(BackendView::from_config).collect();
        let by_name = backends.iter().enumerate().map(|(i, b)| (b.name.clone(), i)).collect();
        Snapshot { version: 1, config, backends, by_name }
    }

    pub fn backend_index(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// A copy with the breaker states given by `state_of(node key)`, one version later.
    pub fn with_breakers(&self, state_of: impl Fn(&str) -> BreakerView) -> Snapshot {
        let mut next = self.clone();
        next.version += 1;
        for node in next.backends.iter_mut().flat_map(|b| b.nodes.iter_mut()) {
            node.breaker = state_of(&node.key);
        }
        next
    }
}
