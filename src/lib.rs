//! Spillway: serve LLM requests on the team's own vLLM fleet while it has headroom, and spill
//! the overflow to hosted APIs before the latency target breaks.
//!
//! The modules follow one request: `api` decodes it, `policy` decides which backends it may
//! use, `route` orders them into a plan, `dispatch` walks the plan through `adapter`s, and the
//! `control` loops keep the snapshot that planning reads.

pub mod adapter;
pub mod canonical;

pub mod agent;
pub mod allocator;
pub mod api;
pub mod capacity;
pub mod cli;
pub mod config;
pub mod control;
pub mod dashboard;
pub mod demo;
pub mod dispatch;
pub mod fleet;
pub mod gate;
pub mod ledger;
pub mod metrics;
pub mod outcome;
pub mod policy;
pub mod report;
pub mod route;
pub mod server;
/// The vLLM-compatible (and hosted-provider) simulator lives with the fleet side, in `vllm/`.
#[path = "../vllm/sim/mod.rs"]
pub mod sim;
pub mod simulate;
pub mod tokens;
