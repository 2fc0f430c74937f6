//! Discovery of a vLLM pool's nodes from Kubernetes, so nodes join and leave without a restart.
//!
//! The work splits in two. The pure half turns watch events into the set of ready nodes of
//! one backend: [`pod`] and [`endpointslice`] decide which objects (or endpoints) are ready
//! and where they listen, [`metadata`] reads the pinned facts a pod announces in its
//! annotations, and [`set`] folds `kube-runtime` watcher events (including the
//! `Init`/`InitApply`/`InitDone` relist) into a [`NodeSet`]. No I/O happens there, so it is
//! tested event by event. The [`watch`] half runs the `kube` watcher against the API server
//! with backoff and publishes each backend's ready list on a `tokio::sync::watch` channel
//! shared by all discovered backends ([`DiscoveredNodes`]), which the snapshot builder reads.
//! Building its client fails with a [`DiscoveryError`].

pub mod endpointslice;
mod error;
pub mod metadata;
pub mod pod;
pub mod set;
pub mod watch;

use std::collections::BTreeMap;

use crate::canonical::BackendName;

pub use error::DiscoveryError;
pub use metadata::NodeMetadata;
pub use set::{Discoverable, NodeSet};
pub use watch::{client_for_url, client_from_env, install_crypto_provider, run};

/// One ready node of a vLLM pool, as discovery found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveredNode {
    /// The pod's name (for an EndpointSlice endpoint without a pod reference: its address).
    pub name: String,
    /// Root address of the node's vLLM server, `http://<podIP>:<port>` (IPv6 in brackets),
    /// without `/v1`.
    pub origin: String,
    /// What the pod announces about itself; empty for EndpointSlices, which carry no pod
    /// annotations.
    pub metadata: NodeMetadata,
    /// The IP of the Kubernetes node the pod runs on (`status.hostIP`), where a DaemonSet's
    /// `hostPort` listens; `None` for EndpointSlices.
    pub host_ip: Option<String>,
}

/// What discovery publishes: backend name → its ready nodes, sorted by (name, origin).
///
/// A backend is absent until its first complete listing; from then on its entry is the
/// whole ready set (possibly empty), replaced on every change.
pub type DiscoveredNodes = BTreeMap<BackendName, Vec<DiscoveredNode>>;

/// `http://<ip>:<port>`, with an IPv6 address in brackets.
pub(crate) fn origin_of(ip: &str, port: u16) -> String {
    if ip.contains(':') && !ip.starts_with('[') {
        format!("http://[{ip}]:{port}")
    } else {
        format!("http://{ip}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_brackets_ipv6_only() {
        assert_eq!(origin_of("10.0.0.5", 8000), "http://10.0.0.5:8000");
        assert_eq!(origin_of("fd00::1", 8000), "http://[fd00::1]:8000");
        assert_eq!(origin_of("[fd00::1]", 8000), "http://[fd00::1]:8000");
    }
}
