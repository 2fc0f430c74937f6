//! The ledger's crash spool: every row is written to a local file as it arrives (so a killed
//! process loses none) and fsynced (in groups, at most once per `fsync_interval` unless a group
//! is full; a slow fsync never holds the next rows back from the file) before the writer
//! batches it for the store, and its segment is deleted once the store has committed every row
//! in it. A router killed mid-load replays what its spool holds at the next start; the store's
//! inserts are idempotent on the row id, so a row replayed after it was committed is not
//! counted twice.
//!
//! `frame` is the record format and the group-commit rule (pure), `segments` the directory,
//! and this file the stage between [`super::LedgerSender::send`] and the writer. A full spool
//! (the store away for long) is logged and counted, and rows go on in memory: it never blocks
//! or fails a request. This module must not write to the store itself; the writer does.

mod frame;
mod segments;
#[cfg(test)]
mod tests;

use std::fs::File;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{sleep, Instant};

use super::record::LedgerRow;
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

/// How a file is made durable: `File::sync_data`, or in tests one that waits on a gate.
type SyncFn = Arc<dyn Fn(&File) -> std::io::Result<()> + Send + Sync>;

/// An open spool, shared by the stage (appends) and the writer (acknowledgements).
#[derive(Clone)]
pub struct Spool {
    segments: Arc<Mutex<Segments>>,
    rule: SyncRule,
    sync: SyncFn,
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
        let sync: SyncFn = Arc::new(File::sync_data);
        Ok((Spool { segments: Arc::new(Mutex::new(segments)), rule, sync }, rows))
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

    /// The same spool, made durable by `sync` instead of `File::sync_data`.
    #[cfg(test)]
    fn with_sync(self, sync: impl Fn(&File) -> std::io::Result<()> + Send + Sync + 'static) -> Spool {
        Spool { sync: Arc::new(sync), ..self }
    }

    fn lock(&self) -> MutexGuard<'_, Segments> {
        self.segments.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Write `rows` to the current segment (the kernel has them: a killed process loses none);
    /// a disk error is logged and the rows go on regardless.
    fn append(&self, rows: &[LedgerRow]) {
        if let Err(e) = self.lock().append(rows, std::time::Instant::now()) {
            tracing::error!(rows = rows.len(), "the ledger spool could not write: rows go on in memory: {e}");
        }
    }

    /// Fsync, off the runtime's threads, every file the rows appended so far may be in.
    fn start_sync(&self) -> JoinHandle<std::io::Result<()>> {
        let files = self.lock().files_to_sync();
        let sync = self.sync.clone();
        tokio::task::spawn_blocking(move || files?.iter().try_for_each(|f| sync(f)))
    }
}

/// The stage: takes rows from the request path and writes each to the spool as it comes, fsyncs
/// them in groups (one fsync at a time, while the next rows go on being written), then hands
/// them to the writer (`hand_on`, the writer's queue). Replayed rows go first. Ends once `stop` fires (or every sender is gone)
/// and every row received is spooled and handed on.
pub(super) async fn run(
    spool: Spool,
    mut rx: mpsc::UnboundedReceiver<LedgerRow>,
    hand_on: impl Fn(LedgerRow),
    replay: Vec<LedgerRow>,
    mut stop: oneshot::Receiver<()>,
) {
    for row in replay {
        hand_on(row);
    }
    let rule = spool.rule;
    let mut last_sync = Instant::now() - rule.interval;
    // Rows written and not yet fsynced; rows whose fsync runs now.
    let mut written: Vec<LedgerRow> = Vec::new();
    let mut syncing: Option<(Vec<LedgerRow>, JoinHandle<std::io::Result<()>>)> = None;
    let mut incoming = Vec::new();
    let (mut listening, mut drained) = (true, false);
    loop {
        let due = rule.due(written.len(), last_sync.elapsed());
        if syncing.is_none() && !written.is_empty() && (drained || due.is_ok()) {
            syncing = Some((std::mem::take(&mut written), spool.start_sync()));
        }
        if drained && syncing.is_none() {
            return;
        }
        let wait = due.err().filter(|_| syncing.is_none() && !written.is_empty());
        tokio::select! {
            biased;
            s = &mut stop, if listening => {
                listening = false;
                // Sent: take what is queued, then end. Dropped without `shutdown`: go on until
                // every sender is gone.
                if s.is_ok() {
                    rx.close();
                }
            }
            synced = async { (&mut syncing.as_mut().expect("guarded").1).await }, if syncing.is_some() => {
                let (rows, _) = syncing.take().expect("guarded");
                if let Err(e) = synced.unwrap_or_else(|e| Err(std::io::Error::other(e))) {
                    tracing::error!(rows = rows.len(), "the ledger spool could not sync: rows go on in memory: {e}");
                }
                last_sync = Instant::now();
                for row in rows {
                    hand_on(row);
                }
            }
            n = rx.recv_many(&mut incoming, MAX_GROUP), if !drained => {
                if n == 0 {
                    drained = true;
                } else {
                    spool.append(&incoming);
                    written.append(&mut incoming);
                }
            }
            () = sleep(wait.unwrap_or_default()), if wait.is_some() => {}
        }
    }
}
