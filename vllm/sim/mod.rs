//! `spillway sim`: one simulated vLLM node or hosted provider, for tests, the demo and benches.
//!
//! A `vllm` sim runs a continuous-batching performance model (`engine.rs`, driven by
//! `engine_loop.rs`) behind vLLM's OpenAI-compatible API and its real `/metrics` names, so
//! that the router's headroom logic sees queues, KV use and TTFT that react to load. The
//! `openai`, `anthropic` and `gemini` sims speak those providers' real wire formats
//! (streaming included) with a fixed TTFT and token rate, per-minute quotas, and prompt-cache
//! usage figures; `vllm` and `openai` also serve legacy completions and deterministic
//! embeddings. Every kind can inject faults, by flag or per request (`x-sim-fault`), and
//! replies are deterministic under `--seed`. This file holds the flags and the lifecycle;
//! it must stay free of modelling and wire details.

mod anthropic_wire;
mod completions_wire;
mod embeddings_wire;
pub mod engine;
mod engine_loop;
pub mod faults;
mod gemini_wire;
pub mod generate;
pub mod metrics;
mod openai_wire;
pub mod quota;
mod responses_wire;
mod server;
mod sse;
pub mod text;

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use faults::FAULT_HEADER;

/// Which backend to simulate.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SimKind {
    Vllm,
    #[value(name = "openai")]
    OpenAi,
    Anthropic,
    Gemini,
}

impl SimKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SimKind::Vllm => "vllm",
            SimKind::OpenAi => "openai",
            SimKind::Anthropic => "anthropic",
            SimKind::Gemini => "gemini",
        }
    }

    /// The model served when `--model` is not given.
    pub fn default_model(self) -> &'static str {
        match self {
            SimKind::Vllm => "meta-llama/Llama-3.1-8B-Instruct",
            SimKind::OpenAi => "gpt-4o-mini",
            SimKind::Anthropic => "claude-3-5-haiku-latest",
            SimKind::Gemini => "gemini-2.0-flash",
        }
    }
}

/// Flags of `spillway sim`.
#[derive(clap::Args, Clone, Debug)]
pub struct SimArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub listen: SocketAddr,
    /// Backend to simulate.
    #[arg(long, value_enum, default_value_t = SimKind::Vllm)]
    pub kind: SimKind,
    /// Model name served (vllm: requests for another model get 404). Default per kind.
    #[arg(long)]
    pub model: Option<String>,
    /// Seed for reply text and fault draws.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Require this API key (Bearer / x-api-key / x-goog-api-key, by kind).
    #[arg(long)]
    pub api_key: Option<String>,
    /// Reply length in tokens when the request sets no lower max_tokens.
    #[arg(long, default_value_t = 64)]
    pub output_tokens: u32,

    /// vllm: most sequences running at once.
    #[arg(long, default_value_t = 16)]
    pub max_num_seqs: usize,
    /// vllm: KV-cache blocks on the GPU.
    #[arg(long, default_value_t = 4096)]
    pub num_gpu_blocks: usize,
    /// vllm: tokens per KV block.
    #[arg(long, default_value_t = 16)]
    pub block_size: usize,
    /// vllm: prefill time per uncached prompt token, in µs.
    #[arg(long, default_value_t = 50.0)]
    pub prefill_us_per_token: f64,
    /// vllm: decode step time with an empty batch, in ms.
    #[arg(long, default_value_t = 8.0)]
    pub itl_base_ms: f64,
    /// vllm: extra decode step time per running sequence, in ms.
    #[arg(long, default_value_t = 0.5)]
    pub itl_per_seq_ms: f64,
    /// vllm: disable prefix caching.
    #[arg(long)]
    pub no_prefix_caching: bool,
    /// vllm: expose V0-era metric names (gpu_cache_usage_perc, time_per_output_token_seconds).
    #[arg(long)]
    pub legacy_metrics: bool,

    /// hosted kinds: time to first token, in ms.
    #[arg(long, default_value_t = 50)]
    pub ttft_ms: u64,
    /// hosted kinds: output tokens per second after the first.
    #[arg(long, default_value_t = 200.0)]
    pub tokens_per_sec: f64,
    /// hosted kinds: requests per minute (0 = unlimited).
    #[arg(long, default_value_t = 0)]
    pub rpm: u64,
    /// hosted kinds: tokens per minute, prompt + max_tokens (0 = unlimited).
    #[arg(long, default_value_t = 0)]
    pub tpm: u64,

    /// Share of requests that fail with --error-status.
    #[arg(long, default_value_t = 0.0)]
    pub error_rate: f64,
    /// Status for --error-rate failures; 0 = the provider's overload status (529 for
    /// anthropic, 503 otherwise).
    #[arg(long, default_value_t = 0)]
    pub error_status: u16,
    /// Share of requests accepted and never answered.
    #[arg(long, default_value_t = 0.0)]
    pub hang_rate: f64,
    /// Cut every stream abruptly after this many tokens.
    #[arg(long)]
    pub drop_after: Option<u32>,
    /// Extra delay before every token, in ms.
    #[arg(long, default_value_t = 0)]
    pub token_delay_ms: u64,

    /// Answer with exactly this text (streamed in pieces of a few characters) instead of
    /// generated words.
    #[arg(long)]
    pub reply: Option<String>,
    /// When a request declares tools and its last message is not a tool result, answer by
    /// calling the tool `tool_choice` names (else the first declared) with these JSON
    /// arguments, streamed in pieces in the provider's own format.
    #[arg(long)]
    pub tool_call_args: Option<String>,
}

#[derive(Parser)]
struct DefaultsOnly {
    #[command(flatten)]
    args: SimArgs,
}

impl SimArgs {
    /// The flag defaults for `kind` serving `model`, listening on 127.0.0.1:0.
    pub fn for_kind(kind: SimKind, model: &str) -> SimArgs {
        let mut a = DefaultsOnly::parse_from(["sim"]).args;
        a.kind = kind;
        a.model = Some(model.to_string());
        a.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        a
    }

    /// The served model name.
    pub fn model_name(&self) -> String {
        self.model.clone().unwrap_or_else(|| self.kind.default_model().to_string())
    }
}

impl Default for SimArgs {
    fn default() -> SimArgs {
        SimArgs::for_kind(SimKind::Vllm, SimKind::Vllm.default_model())
    }
}

/// A running simulator; dropping it stops it.
pub struct SimHandle {
    pub addr: SocketAddr,
    pub kind: SimKind,
    pub model: String,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl SimHandle {
    /// `http://127.0.0.1:PORT` (no path).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stop serving (same as dropping the handle).
    pub fn shutdown(self) {}
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn metrics_page(State(st): State<Arc<server::AppState>>) -> Response {
    let body = st.metrics.as_ref().map(|m| m.encode()).unwrap_or_default();
    let mut resp = body.into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    resp
}

fn router(kind: SimKind, state: Arc<server::AppState>) -> Router {
    let r = Router::new();
    let r = match kind {
        SimKind::Vllm => r
            .route("/v1/chat/completions", post(openai_wire::chat))
            .route("/v1/responses", post(responses_wire::responses))
            // vLLM serves the Messages API natively (since v0.11).
            .route("/v1/messages", post(anthropic_wire::messages))
            .route("/v1/completions", post(completions_wire::completions))
            .route("/v1/embeddings", post(embeddings_wire::embeddings))
            .route("/v1/models", get(openai_wire::models))
            .route("/health", get(|| async {}))
            .route("/metrics", get(metrics_page))
            .route("/version", get(|| async { Json(serde_json::json!({"version": "0.11.0+sim"})) })),
        SimKind::OpenAi => r
            .route("/v1/chat/completions", post(openai_wire::chat))
            .route("/v1/responses", post(responses_wire::responses))
            .route("/v1/completions", post(completions_wire::completions))
            .route("/v1/embeddings", post(embeddings_wire::embeddings))
            .route("/v1/models", get(openai_wire::models)),
        SimKind::Anthropic => r
            .route("/v1/messages", post(anthropic_wire::messages))
            .route("/v1/messages/count_tokens", post(anthropic_wire::count_tokens)),
        SimKind::Gemini => r.route("/v1beta/models/{model_action}", post(gemini_wire::generate)),
    };
    r.with_state(state)
}

/// Serve `args` on `listener` in background tasks; the handle stops them.
pub async fn spawn(args: SimArgs, listener: tokio::net::TcpListener) -> std::io::Result<SimHandle> {
    let addr = listener.local_addr()?;
    let model = args.model_name();
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    let error_status = match (args.error_status, args.kind) {
        (0, SimKind::Anthropic) => 529,
        (0, _) => 503,
        (s, _) => s,
    };
    let faults = faults::Faults::new(
        args.seed,
        args.error_rate,
        error_status,
        args.hang_rate,
        args.drop_after,
        args.token_delay_ms,
    );
    let (engine, metrics) = if args.kind == SimKind::Vllm {
        let cfg = engine::EngineConfig {
            max_num_seqs: args.max_num_seqs.max(1),
            num_gpu_blocks: args.num_gpu_blocks.max(1),
            block_size: args.block_size.max(1),
            prefill_us_per_token: args.prefill_us_per_token,
            itl_base_ms: args.itl_base_ms,
            itl_per_seq_ms: args.itl_per_seq_ms,
            prefix_caching: !args.no_prefix_caching,
        };
        let info = metrics::CacheInfo {
            num_gpu_blocks: cfg.num_gpu_blocks,
            block_size: cfg.block_size,
            prefix_caching: cfg.prefix_caching,
        };
        let m = Arc::new(metrics::SimMetrics::new(&model, args.legacy_metrics, &info));
        let (handle, task) = engine_loop::EngineHandle::spawn(cfg, m.clone());
        tasks.push(task);
        (Some(handle), Some(m))
    } else {
        (None, None)
    };
    let pacer = generate::HostedPacer {
        ttft: Duration::from_millis(args.ttft_ms),
        tokens_per_sec: args.tokens_per_sec,
    };
    let mut state = server::AppState::new(
        args.kind,
        model.clone(),
        args.seed,
        args.api_key.clone(),
        args.output_tokens,
        faults,
        quota::Quota::new(args.rpm, args.tpm),
        engine,
        metrics,
        pacer,
        shutdown_rx,
    );
    state.reply = args.reply.clone();
    state.tool_call_args = args.tool_call_args.clone();
    let app = router(args.kind, Arc::new(state));
    tasks.push(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "sim server stopped");
        }
    }));
    Ok(SimHandle { addr, kind: args.kind, model, shutdown: shutdown_tx, tasks })
}

/// Bind `args.listen`, serve until ctrl-c.
pub async fn run(args: SimArgs) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let kind = args.kind;
    let handle = spawn(args, listener).await?;
    println!("spillway sim ({}) listening on {}", kind.as_str(), handle.base_url());
    tokio::signal::ctrl_c().await?;
    handle.shutdown();
    Ok(())
}
