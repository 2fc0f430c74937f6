//! The process signals a running router answers: SIGHUP reloads the config file; ctrl-c and
//! SIGTERM start the shutdown sequence of [`super::rollout`] (`spillway serve`) or, through
//! [`shutdown_signal`], an immediate graceful drain (the demo).

use std::sync::Arc;

use crate::control::reload::Reloader;

/// Resolves on ctrl-c or SIGTERM, for a process that drains at once (no shutdown delay).
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down: draining in-flight requests");
}

/// Reload the config file on every SIGHUP (logging what happened).
#[cfg(unix)]
pub(crate) async fn reload_on_sighup(reloader: Arc<Reloader>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else { return };
    while hangups.recv().await.is_some() {
        match reloader.reload(|name| std::env::var(name).ok()) {
            Ok(done) => {
                tracing::warn!(who = "SIGHUP", restart_needed = ?done.restart_needed, "config reloaded")
            }
            Err(problems) => {
                tracing::error!(who = "SIGHUP", ?problems, "config reload refused; the old config stays")
            }
        }
    }
}
