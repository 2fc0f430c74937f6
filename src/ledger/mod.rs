//! The cost ledger: one durable row per request (who asked, what served it, tokens, latency,
//! cost), written off the request path so that reports can price tasks later.
//!
//! `record` defines the row and how it is built from a dispatch outcome, `store` keeps rows
//! in SQLite (the default, nothing to install) or PostgreSQL (shared by many replicas) through
//! one code path, and `writer` batches rows in the background and never drops one. The ledger
//! must not block or fail a request: the request path only calls [`LedgerSender::send`], which
//! never waits. It prices nothing itself; cost arrives already computed (or `None`).

mod record;
mod store;
mod writer;

pub use record::{hash_affinity_key, new_record_id, unix_millis, LedgerRecord, Outcome, RequestContext};
pub use store::{Store, StoreKind};
pub use writer::{spawn, spawn_with, LedgerSender, WriterConfig, WriterHandle};
