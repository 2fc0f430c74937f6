//! The ledger's crash spool: every row is appended to a local file and fsynced (in groups, at
//! most once per `fsync_interval` unless a group is full) before the writer batches it for the
//! store, and its segment is deleted once the store has committed every row in it. A router
//! killed mid-load replays what its spool holds at the next start; the store's inserts are
//! idempotent on the row id, so a row replayed after it was committed is not counted twice.
//!
//! `frame` is the record format and the group-commit rule (pure), `segments` the directory,
//! and this file the stage between [`super::LedgerSender::send`] and the writer. A full spool
//! (the store away for long) is logged and counted, and rows go on in memory: it never blocks
//! or fails a request. This module must not write to the store itself; the writer does.

mod frame;
mod segments;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::{sleep, Instant};

use super::record::LedgerRow;
use super::writer::LedgerSender;
pub use frame::SyncRule;
use segments::Segments;
pub use segments::SpoolStats;

/// Rows gathered for one fsync at most.
const MAX_GROUP: usize = 256;

/// Where the spool is and how it syncs.
#[derive(Debug, Clone, PartialEq)]
pub struct SpoolConfig {
    pub dir: PathBuf,
    pub max_bytes: u64,
    pub fsync_interval: Duration,
}

/// An open spool, shared by the stage (appends) and the writer (acknowledgements).
#[derive(Clone)]
pub struct Spool {
    segments: Arc<Mutex<Segments>>,
    rule: SyncRule,
}

impl Spool {
    /// Open (and lock) the spool directory; the rows left in it by an earlier run come back to
    /// be written again.
    pub fn open(config: &SpoolConfig) -> std::io::Result<(Spool, Vec<LedgerRow>)> {
        let (segments, rows, torn) = Segments::open(&config.dir, config.max_bytes)?;
        if !rows.is_empty() || torn > 0 {
            tracing::info!(rows = rows.len(), torn_segments = torn, "replaying the ledger spool");
        }
        let rule = SyncRule { interval: config.fsync_interval, max_rows: MAX_GROUP };
        Ok((Spool { segments: Arc::new(Mutex::new(segments)), rule }, rows))
    }

    pub fn stats(&self) -> SpoolStats {
        self.lock().stats(std::time::Instant::now())
    }

    /// The writer has stopped: delete what the store has.
    pub(super) fn close(&self) {
        self.lock().close();
    }

    /// The store committed `rows`.
    pub(super) fn ack(&self, rows: &[LedgerRow]) {
        self.lock().ack(rows);
    }

    fn lock(&self) -> MutexGuard<'_, Segments> {
        self.segments.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Append and fsync `rows`; a disk error is logged and the rows go on regardless.
    async fn commit(&self, rows: &[LedgerRow]) {
        let handle = {
            let mut segments = self.lock();
            segments.append(rows, std::time::Instant::now()).and_then(|_| segments.sync_handle())
        };
        let synced = match handle {
            Ok(file) => tokio::task::spawn_blocking(move || file.sync_data())
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e))),
            Err(e) => Err(e),
        };
        if let Err(e) = synced {
            tracing::error!(rows = rows.len(), "the ledger spool could not write: rows go on in memory: {e}");
        }
    }
}

/// The stage: takes rows from the request path, spools them in groups, then hands them to the
/// writer. Replayed rows go first. Ends once `stop` fires (or every sender is gone) and every
/// row received is spooled and handed on.
pub(super) async fn run(
    spool: Spool,
    mut rx: mpsc::UnboundedReceiver<LedgerRow>,
    writer: LedgerSender,
    replay: Vec<LedgerRow>,
    mut stop: oneshot::Receiver<()>,
) {
    for row in replay {
        writer.forward(row);
    }
    let rule = spool.rule;
    let mut last_sync = Instant::now() - rule.interval;
    let mut group: Vec<LedgerRow> = Vec::new();
    let (mut stopping, mut listening) = (false, true);
    loop {
        if stopping {
            while let Ok(row) = rx.try_recv() {
                group.push(row);
            }
        }
        let wait = match rule.due(group.len(), last_sync.elapsed()) {
            Ok(()) => Duration::ZERO,
            Err(_) if stopping => Duration::ZERO,
            Err(wait) => wait,
        };
        if wait.is_zero() && !group.is_empty() {
            spool.commit(&group).await;
            last_sync = Instant::now();
            for row in group.drain(..) {
                writer.forward(row);
            }
        }
        if stopping {
            return;
        }
        let room = MAX_GROUP.saturating_sub(group.len());
        tokio::select! {
            biased;
            s = &mut stop, if listening => match s {
                Ok(()) => {
                    stopping = true;
                    rx.close();
                }
                // The handle went without `shutdown`: go on until every sender is gone.
                Err(_) => listening = false,
            },
            n = rx.recv_many(&mut group, room), if room > 0 => {
                if n == 0 {
                    stopping = true;
                }
            }
            () = sleep(wait), if !group.is_empty() => {}
        }
    }
}
