//! Spillway: serve LLM requests on the team's own vLLM fleet while it has headroom, and spill
//! the overflow to hosted APIs before the latency target breaks.
//!
//! The modules follow one request, bottom up: `canonical` is the vocabulary every layer shares,
//! `config` what the operator wrote; `snapshot` is the immutable view planning reads (built by
//! the `control` loops from `fleet` telemetry and the `guard` boards); `api` decodes a request,
//! `policy` decides which backends it may use, `route` orders them into a plan, `dispatch`
//! walks the plan through `adapter`s consulting the `guard`s, and the `outcome` records feed
//! `metrics` and the `ledger`; `keys` are the client keys `api` authenticates (issued ones kept
//! in the ledger's store); `trace` is the OpenTelemetry spans of a request and its calls. `app` assembles a running router. The offline commands
//! (`report`, `capacity`, `simulate`, `demo`, `agent`, `gate`'s CLI, the `sim` simulators)
//! stand apart; `benches/imports.py` checks that no import runs against this order.

pub mod allocator;
pub mod canonical;

pub mod config;
pub mod tokens;

pub mod fleet;
pub mod guard;
pub mod keys;
pub mod ledger;
pub mod outcome;
pub mod snapshot;
pub mod trace;

pub mod adapter;
pub mod policy;
pub mod route;

pub mod dispatch;
pub mod metrics;

pub mod control;
pub mod gate;
pub mod report;

pub mod serve;

pub mod api;
pub mod app;

pub mod agent;
pub mod batch;
pub mod capacity;
pub mod cli;
pub mod demo;
/// The vLLM-compatible (and hosted-provider) simulator lives with the fleet side, in `vllm/`.
#[path = "../vllm/sim/mod.rs"]
pub mod sim;
pub mod simulate;
