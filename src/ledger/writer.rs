//! The background writer: takes ledger records off the request path and writes them to the
//! [`Store`] in batches, and never drops one.
//!
//! The request path calls [`LedgerSender::send`], which never waits: it tries a bounded
//! channel, and when that is full it appends the record to an overflow queue behind a mutex
//! held only for a `push_back` (no await, no I/O). The writer drains both, writes up to
//! `max_batch` records per transaction (or whatever has arrived after `flush_interval`), and
//! when the store fails it keeps the batch and retries with exponential backoff. Memory, not
//! the request path, absorbs an outage; [`LedgerSender::buffered`] says how much, exactly.
//! This module must not decide prices or retry anything but ledger writes.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::task::JoinHandle;
use tokio::time::{sleep, sleep_until, Instant};

use super::record::LedgerRow;
use super::spool::{self, Spool, SpoolStats};
use super::store::Store;

/// How the writer batches and retries.
#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// Bounded channel size; past it records go to the overflow queue.
    pub capacity: usize,
    /// Most records per transaction.
    pub max_batch: usize,
    /// A partial batch is written this long after its first record arrived.
    pub flush_interval: Duration,
    /// First retry delay after a failed write; doubles up to `backoff_max`.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// How long `shutdown` keeps retrying a failing store before handing records back.
    pub shutdown_grace: Duration,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            capacity: 8_192,
            max_batch: 500,
            flush_interval: Duration::from_millis(500),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

#[derive(Default)]
struct Overflow {
    records: VecDeque<LedgerRow>,
    /// Set by the writer once it has drained for the last time; later sends are refused.
    closed: bool,
}

#[derive(Default)]
struct Shared {
    overflow: Mutex<Overflow>,
    wake: Notify,
    /// Accepted by `send` and not yet committed.
    buffered: AtomicU64,
    /// Records that went through the overflow queue (the channel was full).
    overflowed: AtomicU64,
    /// Failed write attempts.
    failed_writes: AtomicU64,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Overflow> {
        self.overflow.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The request path's handle. Cheap to clone; `send` never blocks.
#[derive(Clone)]
pub struct LedgerSender {
    tx: mpsc::Sender<LedgerRow>,
    shared: Arc<Shared>,
    /// With a spool: rows go through the spool stage first (unbounded, so `send` never waits).
    front: Option<mpsc::UnboundedSender<LedgerRow>>,
    spool: Option<Spool>,
}

impl LedgerSender {
    /// Hand a record to the writer without waiting. `Err` gives the record back only when the
    /// writer has shut down; otherwise it is accepted and will be written.
    pub fn send(&self, row: impl Into<LedgerRow>) -> Result<(), Box<LedgerRow>> {
        self.shared.buffered.fetch_add(1, Ordering::SeqCst);
        let sent = match &self.front {
            Some(front) => front.send(row.into()).map_err(|e| Box::new(e.0)),
            None => self.enqueue(row.into()),
        };
        sent.inspect_err(|_| {
            self.shared.buffered.fetch_sub(1, Ordering::SeqCst);
        })
    }

    /// The spool stage hands on a row it has spooled (already counted as buffered).
    pub(super) fn forward(&self, row: LedgerRow) {
        if self.enqueue(row).is_err() {
            self.shared.buffered.fetch_sub(1, Ordering::SeqCst);
            tracing::error!("the ledger writer stopped before the spool stage: a row stays in the spool");
        }
    }

    /// How full the spool is; `None` without one.
    pub(crate) fn spool_stats(&self) -> Option<SpoolStats> {
        self.spool.as_ref().map(Spool::stats)
    }

    fn enqueue(&self, row: LedgerRow) -> Result<(), Box<LedgerRow>> {
        let refused = match self.tx.try_send(row) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Full(record)) => {
                let mut overflow = self.shared.lock();
                if overflow.closed {
                    record
                } else {
                    overflow.records.push_back(record);
                    drop(overflow);
                    self.shared.overflowed.fetch_add(1, Ordering::Relaxed);
                    self.shared.wake.notify_one();
                    return Ok(());
                }
            }
            Err(TrySendError::Closed(record)) => record,
        };
        Err(Box::new(refused))
    }

    /// Records accepted and not yet committed to the store.
    pub fn buffered(&self) -> u64 {
        self.shared.buffered.load(Ordering::SeqCst)
    }
}

/// Owns the writer task.
pub struct WriterHandle {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Vec<LedgerRow>>,
    shared: Arc<Shared>,
    /// The spool stage, stopped (and flushed) before the writer.
    stage: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
    spool: Option<Spool>,
}

impl WriterHandle {
    /// Records accepted and not yet committed to the store.
    pub fn buffered(&self) -> u64 {
        self.shared.buffered.load(Ordering::SeqCst)
    }

    /// Records that found the channel full and went through the overflow queue.
    pub fn overflowed(&self) -> u64 {
        self.shared.overflowed.load(Ordering::Relaxed)
    }

    /// Write attempts that failed (and were retried).
    pub fn failed_writes(&self) -> u64 {
        self.shared.failed_writes.load(Ordering::Relaxed)
    }

    /// Refuse new records, write everything accepted so far, and stop. When the store keeps
    /// failing past `shutdown_grace`, the records not written come back in `Err`.
    pub async fn shutdown(self) -> Result<(), Vec<LedgerRow>> {
        if let Some((stop, stage)) = self.stage {
            let _ = stop.send(());
            if let Err(e) = stage.await {
                tracing::error!("ledger spool stage failed: {e}");
            }
        }
        let _ = self.stop.send(());
        let written = self.task.await;
        if let Some(spool) = &self.spool {
            spool.close();
        }
        match written {
            Ok(unwritten) if unwritten.is_empty() => Ok(()),
            Ok(unwritten) => Err(unwritten),
            Err(e) => {
                tracing::error!("ledger writer task failed: {e}");
                Err(Vec::new())
            }
        }
    }
}

/// Start a writer with default batching and a channel of `capacity` records.
pub fn spawn(store: Store, capacity: usize) -> (LedgerSender, WriterHandle) {
    spawn_with(store, WriterConfig { capacity, ..WriterConfig::default() })
}

/// Start a writer with explicit settings. Needs a Tokio runtime.
pub fn spawn_with(store: Store, config: WriterConfig) -> (LedgerSender, WriterHandle) {
    spawn_writer(store, config, None)
}

/// Start a writer behind `spool`: each row is spooled before it is batched, and `replay` (the
/// rows the spool held at open) is written first. Records the writer could not write at
/// shutdown stay in the spool for the next start.
pub fn spawn_spooled(
    store: Store,
    config: WriterConfig,
    spool: Spool,
    replay: Vec<LedgerRow>,
) -> (LedgerSender, WriterHandle) {
    let (inner, mut handle) = spawn_writer(store, config, Some(spool.clone()));
    let (front, rx) = mpsc::unbounded_channel();
    // Replayed rows are buffered like sent ones until committed.
    inner.shared.buffered.fetch_add(replay.len() as u64, Ordering::SeqCst);
    let (stop_tx, stop_rx) = oneshot::channel();
    let sender = LedgerSender { front: Some(front), spool: Some(spool.clone()), ..inner.clone() };
    let spool_for_close = spool.clone();
    let stage = tokio::spawn(spool::run(spool, rx, move |row| inner.forward(row), replay, stop_rx));
    handle.stage = Some((stop_tx, stage));
    handle.spool = Some(spool_for_close);
    (sender, handle)
}

fn spawn_writer(store: Store, config: WriterConfig, spool: Option<Spool>) -> (LedgerSender, WriterHandle) {
    let (tx, rx) = mpsc::channel(config.capacity.max(1));
    let (stop_tx, stop_rx) = oneshot::channel();
    let shared = Arc::new(Shared::default());
    let writer = Writer {
        store,
        config,
        rx,
        shared: Arc::clone(&shared),
        stop: stop_rx,
        listening: true,
        stopping: false,
        spool: spool.clone(),
    };
    let task = tokio::spawn(writer.run());
    let sender = LedgerSender { tx, shared: Arc::clone(&shared), front: None, spool };
    (sender, WriterHandle { stop: stop_tx, task, shared, stage: None, spool: None })
}

struct Writer {
    store: Store,
    config: WriterConfig,
    rx: mpsc::Receiver<LedgerRow>,
    shared: Arc<Shared>,
    stop: oneshot::Receiver<()>,
    /// False once the handle is dropped without `shutdown` (the receiver must not be polled).
    listening: bool,
    stopping: bool,
    /// Told of every committed row, so it can free their segments.
    spool: Option<Spool>,
}

impl Writer {
    /// Returns the records it could not write before giving up at shutdown.
    async fn run(mut self) -> Vec<LedgerRow> {
        let max_batch = self.config.max_batch.max(1);
        let mut batch: Vec<LedgerRow> = Vec::new();
        let mut backoff = self.config.backoff_min;
        let mut give_up_at: Option<Instant> = None;
        loop {
            if self.stopping {
                self.drain_all(&mut batch);
            } else {
                self.fill(&mut batch, max_batch).await;
            }
            // Write full batches (and, when the timer fired or we are stopping, the rest).
            while !batch.is_empty() {
                let n = batch.len().min(max_batch);
                match self.store.insert_rows(&batch[..n]).await {
                    Ok(()) => {
                        if let Some(spool) = &self.spool {
                            spool.ack(&batch[..n]);
                        }
                        batch.drain(..n);
                        self.shared.buffered.fetch_sub(n as u64, Ordering::SeqCst);
                        backoff = self.config.backoff_min;
                    }
                    Err(e) => {
                        self.shared.failed_writes.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            buffered = self.shared.buffered.load(Ordering::SeqCst),
                            "ledger write failed, retrying in {backoff:?}: {e}"
                        );
                        if self.stopping {
                            give_up_at.get_or_insert_with(|| Instant::now() + self.config.shutdown_grace);
                        }
                        if give_up_at.is_some_and(|t| Instant::now() + backoff > t) {
                            self.drain_all(&mut batch);
                            return batch;
                        }
                        self.pause(backoff).await;
                        backoff = (backoff * 2).min(self.config.backoff_max);
                    }
                }
                if !self.stopping && batch.len() < max_batch {
                    break;
                }
            }
            if self.stopping && batch.is_empty() && self.drained() {
                return batch;
            }
        }
    }

    /// Gather records until the batch is full, `flush_interval` has passed since the first
    /// one, or shutdown is asked for.
    async fn fill(&mut self, batch: &mut Vec<LedgerRow>, max_batch: usize) {
        let mut deadline = (!batch.is_empty()).then(|| Instant::now() + self.config.flush_interval);
        loop {
            self.take_overflow(batch, max_batch);
            if batch.len() >= max_batch || self.stopping {
                return;
            }
            if deadline.is_none() && !batch.is_empty() {
                deadline = Some(Instant::now() + self.config.flush_interval);
            }
            let room = max_batch - batch.len();
            tokio::select! {
                biased;
                stop = &mut self.stop, if self.listening => self.on_stop(stop),
                n = self.rx.recv_many(batch, room) => {
                    if n == 0 {
                        // Every sender is gone: nothing more can arrive.
                        self.stopping = true;
                    }
                }
                () = self.shared.wake.notified() => {}
                () = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => return,
            }
        }
    }

    /// Sleep between retries, waking early (but not retrying early) only for shutdown.
    async fn pause(&mut self, wait: Duration) {
        if self.stopping || !self.listening {
            sleep(wait).await;
            return;
        }
        tokio::select! {
            stop = &mut self.stop => {
                self.on_stop(stop);
                sleep(wait).await;
            }
            () = sleep(wait) => {}
        }
    }

    fn on_stop(&mut self, stop: Result<(), oneshot::error::RecvError>) {
        match stop {
            Ok(()) => self.stopping = true,
            // The handle was dropped without `shutdown`: keep writing until every sender is
            // gone, and never poll the finished receiver again.
            Err(_) => self.listening = false,
        }
    }

    fn take_overflow(&self, batch: &mut Vec<LedgerRow>, max_batch: usize) {
        let mut overflow = self.shared.lock();
        let n = overflow.records.len().min(max_batch.saturating_sub(batch.len()));
        batch.extend(overflow.records.drain(..n));
    }

    /// Close the channel and the overflow queue and take everything left in them.
    fn drain_all(&mut self, batch: &mut Vec<LedgerRow>) {
        self.rx.close();
        while let Ok(record) = self.rx.try_recv() {
            batch.push(record);
        }
        let mut overflow = self.shared.lock();
        overflow.closed = true;
        batch.extend(overflow.records.drain(..));
    }

    fn drained(&self) -> bool {
        self.rx.is_empty() && self.shared.lock().records.is_empty()
    }
}
