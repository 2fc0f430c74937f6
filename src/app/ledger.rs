//! The ledger while the router runs: its store, opened at start, and its writer (spooled to
//! disk where the config says), drained and closed at shutdown.

use std::time::Duration;

use crate::config::SpoolSettings;
use crate::ledger::{LedgerSender, Store, WriterHandle};

/// The ledger's store and writer while the router runs.
pub(super) struct Ledger {
    pub store: Store,
    pub sender: LedgerSender,
    writer: WriterHandle,
}

impl Ledger {
    pub async fn open(url: &str, spool: &SpoolSettings) -> std::io::Result<Ledger> {
        let store = Store::open(url).await.map_err(std::io::Error::other)?;
        let writer_config = crate::ledger::WriterConfig { capacity: 8_192, ..Default::default() };
        let spooled = spool.dir_for(url).and_then(|dir| {
            let config = crate::ledger::SpoolConfig {
                dir,
                max_bytes: spool.max_bytes,
                fsync_interval: Duration::from_millis(spool.fsync_interval_ms),
            };
            crate::ledger::Spool::open(&config)
                .inspect_err(|e| {
                    let dir = config.dir.display();
                    tracing::error!("ledger.spool.dir: cannot use {dir}, rows wait in memory only: {e}");
                })
                .ok()
        });
        let (sender, writer) = match spooled {
            Some((spool, replay)) => {
                crate::ledger::spawn_spooled(store.clone(), writer_config, spool, replay)
            }
            None => crate::ledger::spawn_with(store.clone(), writer_config),
        };
        Ok(Ledger { store, sender, writer })
    }

    /// Write everything accepted, then close the store.
    pub async fn close(self) {
        drop(self.sender);
        if let Err(unwritten) = self.writer.shutdown().await {
            tracing::error!(rows = unwritten.len(), "the ledger store kept failing: rows were not written");
        }
        self.store.close().await;
    }
}
