//! The offline commands: the CLI as a process, the config schema and where it is written out,
//! the docs against the code (generated tables, links), and the simulator of whole scenarios.
//!
//! One test binary per area (each links the whole crate); each module is one file beside this.

mod cli;
mod config_schema;
mod docs;
mod simulate;
mod simulate_batch;
