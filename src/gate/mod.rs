//! The evaluation gate: no backend serves a task until it has shown it can do that task.
//!
//! A task's golden set (`golden`) is run through a backend (`run`, each item a synthetic call
//! of the dispatcher, through `call`) and graded (`grade`); the result is kept per
//! (task, backend, `fingerprint`) in the ledger store (`store`). The `board` decides from the
//! results which backends may serve gated tasks; `requalify` re-runs the gate when a pool's
//! node reports new weights, quantisation or engine; `shadow` sends a sample of live requests
//! to the other backends and grades their answers offline; `report` shows it all. What goes
//! wrong on the way is a [`GateError`].

pub mod board;
pub mod call;
pub mod cli;
mod error;
pub mod fingerprint;
pub mod grade;
pub mod report;
pub mod requalify;
pub mod run;
pub mod service;
pub mod shadow;
pub mod store;
pub mod summary;

pub use error::GateError;
