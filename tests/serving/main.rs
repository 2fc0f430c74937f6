//! The serving path end to end: the API (chat, embeddings, completions), the HTTP edge, failover, each adapter and SDK, secrets, metrics and logs.
//!
//! One test binary per area (each links the whole crate); each module is one file beside this.

#[path = "../common/mod.rs"]
mod common;

mod adapters;
mod affinity;
mod agent_sessions;
mod agents;
mod anthropic_sdk;
mod api;
mod batch_lines;
mod batches;
mod clouds;
mod dialects;
mod echo_upstreams;
mod echoes;
mod edge;
mod embeddings;
mod failover;
mod in_process;
mod logs;
mod messages;
mod metrics;
mod openai_sdk;
mod portability;
mod prompt_cache;
mod reload;
mod responses;
mod responses_socket;
mod secrets;
mod sim;
mod sim_batches;
mod sim_engines;
mod spill_scale;
mod tls;
mod traces;
