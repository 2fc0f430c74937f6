//! The books: the ledger on SQLite and PostgreSQL, and the cost report built from it.
//!
//! One test binary per area (each links the whole crate); each module is one file beside this.

#[path = "../common/mod.rs"]
mod common;

mod batch_crash;
mod batch_leases;
mod cost_report;
mod ledger;
mod ledger_crash;
mod team_report;
