//! The HTTP edge: accepts client connections and serves the API on them, so that what a client
//! can hold of the router is bounded by configuration, not by the client's manners.
//!
//! Every accepted socket gets `TCP_NODELAY` (a streamed answer's last small write must not wait
//! for the client's delayed ACK). HTTP/1.1 with keep-alive and HTTP/2 with prior knowledge
//! (h2c) are both spoken on the same port. Request heads are capped in size and field count;
//! the watchdog closes connections whose heads dawdle or that idle too long; a per-address cap
//! bounds one client's sockets. On shutdown the listener closes, idle connections are told to
//! go, requests in flight get until the drain deadline, and whatever is still open then is
//! closed, so the router always gets to flush its books.
//!
//! This module knows nothing of routes or dialects: it serves whatever `axum::Router` it gets.

mod per_client;
mod watchdog;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tower_service::Service;

use crate::config::LimitsConfig;
use crate::metrics::{ConnectionEnd, EdgeMetrics};
use per_client::{ClientSlot, PerClient};
use watchdog::{Activity, Dawdled, Watched};

/// Where the server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Serving,
    /// No new connections; each open one finishes what it is doing and closes.
    Draining,
    /// The drain deadline passed: close everything now.
    Closing,
}

/// A connection's life, for a route that takes the connection over (a WebSocket upgrade): a
/// request extension whose holder keeps the connection counted (its client's slot, the open
/// gauge, the drain's wait) after the upgrade, and which says when the server is leaving.
#[derive(Clone)]
pub struct ConnectionLife {
    stage: watch::Receiver<Stage>,
    _hold: mpsc::Sender<Infallible>,
}

impl ConnectionLife {
    /// Resolves once the server drains (finish what is in flight, then close) or closes.
    pub async fn leaving(&mut self) {
        let _ = self.stage.wait_for(|s| *s != Stage::Serving).await;
    }

    /// Resolves once the drain deadline has passed: close now.
    pub async fn closed(&mut self) {
        let _ = self.stage.wait_for(|s| *s == Stage::Closing).await;
    }
}

/// Serve `app` on `listener` until `shutdown` resolves, then drain within `limits.drain_timeout`.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: &LimitsConfig,
    metrics: EdgeMetrics,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let settings = Arc::new(Settings {
        builder: builder(limits),
        header_timeout: limits.header_read_timeout(),
        idle_timeout: limits.idle_timeout(),
        metrics,
    });
    let per_client = PerClient::new(limits.max_connections_per_client);
    let (stage_tx, stage_rx) = watch::channel(Stage::Serving);
    // Every connection task holds a sender; `recv` answers `None` once all are gone.
    let (open_tx, mut open_rx) = mpsc::channel::<Infallible>(1);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors or the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let Some(slot) = per_client.admit(peer.ip()) else {
            settings.metrics.closed(ConnectionEnd::PerClientLimit);
            continue;
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY could not be set");
        }
        let conn = Conn { stream, slot, stage: stage_rx.clone(), _open: open_tx.clone() };
        tokio::spawn(connection(conn, app.clone(), Arc::clone(&settings)));
    }
    drop(listener);
    drop(open_tx);
    let _ = stage_tx.send(Stage::Draining);
    if tokio::time::timeout(limits.drain_timeout(), open_rx.recv()).await.is_err() {
        tracing::warn!("drain deadline passed: closing the connections still open");
        let _ = stage_tx.send(Stage::Closing);
        let _ = tokio::time::timeout(Duration::from_secs(1), open_rx.recv()).await;
    }
    Ok(())
}

struct Settings {
    builder: auto::Builder<TokioExecutor>,
    header_timeout: Duration,
    idle_timeout: Duration,
    metrics: EdgeMetrics,
}

/// HTTP/1.1 and h2c with the configured caps on a request head.
fn builder(limits: &LimitsConfig) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .keep_alive(true)
        // The watchdog times heads from their first byte; hyper's own timer would also close
        // connections idling between requests.
        .header_read_timeout(None)
        .max_headers(limits.max_headers)
        // Caps the read buffer, so a head larger than this gets 431.
        .max_buf_size(limits.max_header_bytes.max(8192));
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    builder
}

/// One accepted connection and what it holds while it is open.
struct Conn {
    stream: TcpStream,
    slot: ClientSlot,
    stage: watch::Receiver<Stage>,
    _open: mpsc::Sender<Infallible>,
}

async fn connection(conn: Conn, app: axum::Router, settings: Arc<Settings>) {
    let Conn { stream, slot, mut stage, _open } = conn;
    let activity = Activity::new();
    let io = TokioIo::new(Watched::new(stream, Arc::clone(&activity)));
    let requests = Arc::clone(&activity);
    let (hold, mut upgraded) = mpsc::channel::<Infallible>(1);
    let life = ConnectionLife { stage: stage.clone(), _hold: hold };
    let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
        let in_flight = requests.request_started();
        let mut app = app.clone();
        let mut request = request.map(Body::new);
        if request.headers().contains_key(http::header::UPGRADE) {
            request.extensions_mut().insert(life.clone());
        }
        async move {
            let response = app.call(request).await?;
            // The request counts as in flight until its body is sent (or dropped).
            Ok::<_, Infallible>(response.map(|body| {
                Body::new(body.map_frame(move |frame| {
                    let _ = &in_flight;
                    frame
                }))
            }))
        }
    });
    settings.metrics.open.inc();
    let mut end = {
        let served = settings.builder.serve_connection_with_upgrades(io, service);
        tokio::pin!(served);
        loop {
            tokio::select! {
                done = served.as_mut() => break if done.is_ok() { ConnectionEnd::Closed } else { ConnectionEnd::Error },
                dawdled = activity.dawdled(settings.header_timeout, settings.idle_timeout) => break match dawdled {
                    Dawdled::HeaderTimeout => ConnectionEnd::HeaderTimeout,
                    Dawdled::Idle => ConnectionEnd::Idle,
                },
                changed = stage.changed() => match changed.map(|()| *stage.borrow()) {
                    Ok(Stage::Serving) => {}
                    Ok(Stage::Draining) => served.as_mut().graceful_shutdown(),
                    Ok(Stage::Closing) | Err(_) => break ConnectionEnd::DrainDeadline,
                },
            }
        }
    };
    // A connection taken over by an upgrade stays counted while its new owner holds its life
    // (each request's copy went with the service; `recv` answers once the last is dropped).
    if end == ConnectionEnd::Closed {
        tokio::select! {
            None = upgraded.recv() => {}
            _ = stage.wait_for(|s| *s == Stage::Closing) => end = ConnectionEnd::DrainDeadline,
        }
    }
    settings.metrics.open.dec();
    settings.metrics.closed(end);
    drop(slot);
}
