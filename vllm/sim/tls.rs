//! HTTPS for a simulator: a certificate authority made at start (the client is handed its PEM
//! to trust, as it would be a private CA's), a leaf certificate for 127.0.0.1 and localhost, and
//! connections served over TLS with HTTP/2 or HTTP/1.1 as ALPN agrees, advertising a chosen
//! `SETTINGS_MAX_CONCURRENT_STREAMS` and, if asked, accepting only so many connections at once,
//! as a provider that limits them does. Nothing here knows a wire format: it carries the same
//! router the plain server does.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

/// A CA and the server configuration of a leaf certificate it signed.
pub struct Minted {
    /// The CA's certificate, PEM: what a client trusts.
    pub ca_pem: String,
    pub server: Arc<rustls::ServerConfig>,
}

fn e(what: &'static str) -> impl Fn(rcgen::Error) -> String {
    move |err| format!("{what}: {err}")
}

/// Make a CA and a leaf for `127.0.0.1` and `localhost` signed by it.
pub fn mint() -> Result<Minted, String> {
    let ca_key = rcgen::KeyPair::generate().map_err(e("CA key"))?;
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(e("CA"))?;
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name.push(rcgen::DnType::CommonName, "spillway sim CA");
    let ca_cert = ca.self_signed(&ca_key).map_err(e("CA certificate"))?;
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let leaf_key = rcgen::KeyPair::generate().map_err(e("server key"))?;
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
        .map_err(e("server certificate"))?;
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).map_err(e("server certificate"))?;
    let key = rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der())
        .map_err(|err| format!("server key: {err}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| format!("TLS versions: {err}"))?
        .with_no_client_auth()
        .with_single_cert(vec![leaf_cert.der().clone(), ca_cert.der().clone()], key)
        .map_err(|err| format!("server certificate: {err}"))?;
    server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Minted { ca_pem: ca_cert.pem(), server: Arc::new(server) })
}

/// Connections the server holds open now, and the most it held at once.
#[derive(Debug, Default)]
pub struct Connections {
    pub open: AtomicUsize,
    pub peak: AtomicUsize,
    pub accepted: AtomicUsize,
}

/// Serve `app` over TLS on `listener` until `shutdown` says so.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    server: Arc<rustls::ServerConfig>,
    max_streams: u32,
    max_connections: usize,
    connections: Arc<Connections>,
    mut shutdown: watch::Receiver<bool>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(server);
    let limit = (max_connections > 0).then(|| Arc::new(Semaphore::new(max_connections)));
    loop {
        // A provider that limits connections leaves the next one waiting in its backlog.
        let permit = match &limit {
            Some(limit) => match Arc::clone(limit).acquire_owned().await {
                Ok(permit) => Some(permit),
                Err(_) => return,
            },
            None => None,
        };
        let (tcp, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    tracing::warn!(error = %e, "sim: accept failed");
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, app, connections) = (acceptor.clone(), app.clone(), Arc::clone(&connections));
        tokio::spawn(async move {
            let _permit = permit;
            let Ok(tls) = acceptor.accept(tcp).await else { return };
            connections.accepted.fetch_add(1, Ordering::Relaxed);
            let now = connections.open.fetch_add(1, Ordering::Relaxed) + 1;
            connections.peak.fetch_max(now, Ordering::Relaxed);
            let mut builder = auto::Builder::new(TokioExecutor::new());
            // A client that gives up on a stream the server has not yet picked up resets it.
            // hyper closes the whole connection (every stream on it broken) past 20 such
            // streams at once, which a sim starved of CPU reaches; a provider's front counts
            // them against the streams it allows, as here.
            builder
                .http2()
                .max_concurrent_streams(max_streams)
                .max_pending_accept_reset_streams(max_streams as usize);
            let service = TowerToHyperService::new(app);
            if let Err(e) = builder.serve_connection_with_upgrades(TokioIo::new(tls), service).await {
                tracing::debug!(error = %e, "sim: a TLS connection ended");
            }
            connections.open.fetch_sub(1, Ordering::Relaxed);
        });
    }
}
