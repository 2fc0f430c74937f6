//! Spillway: serve LLM requests on the team's own vLLM fleet while it has headroom, and spill
//! the overflow to hosted APIs before the latency target breaks.
//!
//! The modules are grouped bottom up below (rustfmt sorts within a group). `benches/imports.py`
//! holds the exact order, one family per layer, and `--check` proves that a module imports only
//! its own family and those beneath it:
//! - the vocabulary: `allocator`, `canonical` (requests, events, errors every layer shares),
//!   `tokens` (each backend's token counts);
//! - `config`, what the operator wrote;
//! - `adapter`, who is at the other end of a backend: its `provider` (one file each, behind
//!   one trait), the wires they speak, the transport and the clouds' credentials;
//! - the state the request path reads and feeds, and its records: `fleet` telemetry, `trace`
//!   spans, `outcome` records, the `ledger`, the `guard` boards, client `keys`, and the
//!   immutable `snapshot` planning reads;
//! - the request path: `policy` decides which backends a request may use, `route` orders them
//!   into a plan, `dispatch` walks it through the adapters, and `metrics` count it;
//! - beside it: `batch` jobs, the `control` loops that build each snapshot, the evaluation
//!   `gate` (its board read by the snapshot loop through `control`'s `GateVerdicts`), the
//!   `report` over the ledger;
//! - `serve`, the request pipeline every dialect's door shares;
//! - `api`, the doors, the edge, admin and readiness; `app`, which assembles a running router;
//! - the offline commands and side binaries (`agent`, `capacity`, the `sim` simulators,
//!   `demo`, `simulate`, `cli`).

pub mod allocator;
pub mod canonical;
pub mod tokens;

pub mod config;

pub mod adapter;

pub mod fleet;
pub mod guard;
pub mod keys;
pub mod ledger;
pub mod outcome;
pub mod snapshot;
pub mod trace;

pub mod dispatch;
pub mod metrics;
pub mod policy;
pub mod route;

pub mod batch;
pub mod control;
pub mod gate;
pub mod report;

pub mod serve;

pub mod api;
pub mod app;

pub mod agent;
pub mod capacity;
pub mod cli;
pub mod demo;
/// The vLLM-compatible (and hosted-provider) simulator lives with the fleet side, in `vllm/`.
#[path = "../vllm/sim/mod.rs"]
pub mod sim;
pub mod simulate;
