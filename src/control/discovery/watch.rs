//! The `kube` half: building a client and running the watcher for one backend.
//!
//! [`run`] watches the pool's pods (or EndpointSlices) in `namespace` with the configured
//! label selector through `kube-runtime`'s watcher, which lists, then watches from the
//! list's resource version, re-watches when a watch call ends and relists when the version
//! has expired. Errors are logged and retried under the watcher's default backoff (up to
//! about 30 s between tries); while the API server is unreachable the last published set
//! stays, since a vanished node shows up as stale telemetry anyway.
//!
//! TLS: `kube` is built with `rustls-tls` and `ring` only, the same provider `reqwest` uses,
//! so exactly one rustls crypto provider is compiled in. [`install_crypto_provider`] also
//! installs `ring` as the process default, so that a future dependency bringing `aws-lc-rs`
//! cannot turn client construction into a "no process-level CryptoProvider" panic.

use std::pin::pin;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use tokio::sync::watch;

use super::error::DiscoveryError;
use super::set::{Discoverable, NodeSet};
use super::{DiscoveredNode, DiscoveredNodes};
use crate::canonical::BackendName;
use crate::config::{KubeResource, KubernetesDiscovery};

/// Make `ring` the process-wide rustls crypto provider unless one is installed already.
/// Idempotent; [`client_from_env`] and [`client_for_url`] call it.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: some provider is then installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A client from the environment: the kubeconfig (`$KUBECONFIG` or `~/.kube/config`) if
/// there is one, else the in-cluster service account. Must run inside a tokio runtime.
pub async fn client_from_env() -> Result<kube::Client, DiscoveryError> {
    install_crypto_provider();
    kube::Client::try_default().await.map_err(|source| DiscoveryError::FromEnv { source })
}

/// A client for the API server at `url` (`http://…` or `https://…`), without credentials,
/// verifying HTTPS against the system's trust store. Meant for tests and for a local
/// `kubectl proxy`. Must be called inside a tokio runtime.
pub fn client_for_url(url: &str) -> Result<kube::Client, DiscoveryError> {
    install_crypto_provider();
    let uri: http::Uri =
        url.parse().map_err(|source| DiscoveryError::Url { url: url.to_string(), source })?;
    kube::Client::try_from(kube::Config::new(uri))
        .map_err(|source| DiscoveryError::Client { url: url.to_string(), source })
}

/// Watch backend `backend`'s nodes as `cfg` says and keep `out[backend]` equal to its ready
/// nodes, sorted by (name, origin). The entry appears after the first complete listing and
/// is rewritten (and receivers woken) only when the set changes. Several backends may share
/// one `out`; each touches only its own entry.
///
/// Runs until every receiver of `out` is dropped; watch errors are retried with backoff.
pub async fn run(
    backend: String,
    cfg: KubernetesDiscovery,
    client: kube::Client,
    out: watch::Sender<DiscoveredNodes>,
) {
    match cfg.resource {
        KubeResource::Pods => run_for::<Pod>(backend, cfg, client, out).await,
        KubeResource::Endpointslices => run_for::<EndpointSlice>(backend, cfg, client, out).await,
    }
}

async fn run_for<K>(
    backend: String,
    cfg: KubernetesDiscovery,
    client: kube::Client,
    out: watch::Sender<DiscoveredNodes>,
) where
    K: Discoverable + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
{
    let api: Api<K> = Api::namespaced(client, &cfg.namespace);
    let config = watcher::Config::default().labels(&cfg.selector);
    let mut events = pin!(watcher(api, config).default_backoff());
    let mut set = NodeSet::new(cfg.port);
    tracing::info!(backend, namespace = cfg.namespace, selector = cfg.selector, resource = ?cfg.resource, "kubernetes discovery started");
    loop {
        let item = tokio::select! {
            item = events.next() => item,
            () = out.closed() => return,
        };
        match item {
            Some(Ok(event)) => {
                if set.apply(event) {
                    publish(&out, &backend, set.nodes());
                }
            }
            Some(Err(e)) => {
                tracing::warn!(backend, error = %e, "kubernetes discovery: watch failed, retrying")
            }
            // The watcher's stream does not end; if it ever did, there is nothing more to learn.
            None => return,
        }
    }
}

/// Store `nodes` as `backend`'s entry, waking receivers only when it differs.
fn publish(out: &watch::Sender<DiscoveredNodes>, backend: &str, nodes: Vec<DiscoveredNode>) {
    out.send_if_modified(|all| {
        if all.get(backend) == Some(&nodes) {
            return false;
        }
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        tracing::info!(backend, nodes = ?names, "kubernetes discovery: ready nodes changed");
        all.insert(BackendName::from(backend), nodes);
        true
    });
}
