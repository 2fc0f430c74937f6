//! The cost ledger: one durable row per request (who asked, what served it, tokens, latency,
//! cost), written off the request path so that reports can price tasks later.
//!
//! `record` defines the row and how it is built from a dispatch outcome, `store` keeps rows
//! in SQLite (the default, nothing to install) or PostgreSQL (shared by many replicas) through
//! one code path (its failures are a [`StoreError`]), and `writer` batches rows in the
//! background and never drops one. The ledger must not block or fail a request: the request
//! path only calls [`LedgerSender::send`], which never waits. `book` prices hosted requests at
//! list price and `usage` records GPU time per node-minute (with its `occupancy`, running and
//! capacity × time); sharing GPU time among tasks is
//! the reports' job. `spool` keeps each row in a local file, fsynced, until the store has it, so
//! a killed router loses no row it had accepted.

mod book;
mod error;
mod occupancy;
mod price;
mod record;
pub mod spool;
mod store;
pub mod usage;
mod writer;

pub use book::LedgerBook;
pub use error::{RedactedUrl, StoreError};
pub use price::{call_cost, hosted_cost, slot_cost, Tokens};
pub use record::{new_record_id, rfc3339, unix_millis, LedgerRecord, LedgerRow, Outcome};
pub use spool::{Spool, SpoolConfig, SpoolStats};
pub use store::{Store, StoreKind};
pub use writer::{spawn, spawn_spooled, spawn_with, LedgerSender, WriterConfig, WriterHandle};
