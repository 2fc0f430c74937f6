//! `spillway sim`: one simulated vLLM node or hosted provider, for tests, the demo and benches.
//!
//! A `vllm` sim runs a continuous-batching performance model (`engine.rs`, driven by
//! `engine_loop.rs`) behind vLLM's OpenAI-compatible API and its real `/metrics` names, so
//! that the router's headroom logic sees queues, KV use and TTFT that react to load;
//! `--engine` makes the same node present itself as SGLang, llama.cpp, TensorRT-LLM or TGI
//! instead (that engine's metric names, metrics path and identity endpoints: `pages/`, wired
//! in `routes.rs`). The `openai`, `anthropic` and `gemini` sims speak those providers' real
//! wire formats (streaming included) with a fixed TTFT and token rate, per-minute quotas, and
//! prompt-cache usage figures (Anthropic's from the request's `cache_control` breakpoints,
//! `prompt_cache.rs`), their batch APIs (`batch_store.rs`, `files_openai.rs`,
//! `batches_openai.rs`, `batches_anthropic.rs`), and keep a log of the Messages requests they were sent for tests; `vllm` and `openai` also serve legacy completions and
//! deterministic embeddings. Every kind can inject faults, by flag or per request
//! (`x-sim-fault`), quote back the credentials it was sent in its errors (`echo.rs`), and
//! replies are deterministic under `--seed`. The flags are `args.rs`'s;
//! this file holds the lifecycle and must stay free of modelling and wire details.

mod anthropic_wire;
mod args;
mod azure;
mod batch_lines;
mod batch_store;
mod batches_anthropic;
mod batches_openai;
mod bedrock;
mod completions_wire;
mod converse_wire;
mod echo;
mod embeddings_wire;
pub mod engine;
mod engine_loop;
mod entra;
pub mod faults;
mod files_openai;
mod gemini_wire;
pub mod generate;
mod google_oauth;
mod openai_wire;
pub mod pages;
pub mod prompt_cache;
pub mod quota;
mod responses_wire;
mod routes;
mod server;
mod sigv4;
mod sse;
pub mod text;
mod tls;
mod vertex;

use crate::fleet::engines::Engine;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use args::{SimArgs, SimKind};
pub use faults::FAULT_HEADER;
pub use responses_wire::ENCRYPTED_PREFIX;

/// A running simulator; dropping it stops it.
pub struct SimHandle {
    pub addr: SocketAddr,
    pub kind: SimKind,
    /// The engine a `vllm`-kind node presents itself as.
    pub engine: Engine,
    pub model: String,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    state: Arc<server::AppState>,
    /// With `--tls`: the PEM of the CA that signed its certificate.
    ca_pem: Option<String>,
    connections: Arc<tls::Connections>,
}

impl SimHandle {
    /// `http://127.0.0.1:PORT`, or `https://…` with `--tls` (no path).
    pub fn base_url(&self) -> String {
        let scheme = if self.ca_pem.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// With `--tls`: the PEM of the CA a client must trust.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// With `--tls`: TLS connections open now, the most open at once, and accepted in all.
    pub fn connections(&self) -> (usize, usize, usize) {
        use std::sync::atomic::Ordering::Relaxed;
        let c = &self.connections;
        (c.open.load(Relaxed), c.peak.load(Relaxed), c.accepted.load(Relaxed))
    }

    /// Where this node's Prometheus page is (`/metrics`, or trtllm's `/prometheus/metrics`).
    pub fn metrics_url(&self) -> String {
        format!("{}{}", self.base_url(), pages::metrics_path(self.engine))
    }

    /// The request log: the bodies of the last 256 Messages requests (`POST /v1/messages`)
    /// this sim was sent, oldest first, as they arrived, for tests to check what a client
    /// (the router) put in them.
    pub fn requests(&self) -> Vec<serde_json::Value> {
        self.state.logged()
    }

    /// How many access tokens a `vertex` sim's (or an `azure_openai` sim's Entra) token
    /// endpoint has granted.
    pub fn tokens_granted(&self) -> u64 {
        let google = self.state.google.as_ref().map(|a| &a.grants);
        let entra = self.state.entra.as_ref().map(|a| &a.grants);
        google.or(entra).map_or(0, |n| n.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Every access token a `vertex` sim's (or an `azure_openai` sim's Entra) token endpoint
    /// has issued, for tests to look for.
    pub fn issued_tokens(&self) -> Vec<String> {
        let google = self.state.google.as_ref().map(|a| a.issued());
        let entra = self.state.entra.as_ref().map(|a| a.issued());
        google.into_iter().chain(entra).flatten().collect()
    }

    /// The W3C `traceparent` headers of the generation requests this sim was sent (those
    /// that had one), oldest first, failed ones included.
    pub fn traceparents(&self) -> Vec<String> {
        self.state.traceparents()
    }

    /// How many times its Prometheus page was served (scrapes of this node, by anyone).
    pub fn pages_served(&self) -> u64 {
        self.state.pages_served.load(std::sync::atomic::Ordering::Relaxed)
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

/// Serve `args` on `listener` in background tasks; the handle stops them.
pub async fn spawn(args: SimArgs, listener: tokio::net::TcpListener) -> std::io::Result<SimHandle> {
    args.check().map_err(|m| std::io::Error::new(std::io::ErrorKind::InvalidInput, m))?;
    let addr = listener.local_addr()?;
    let model = args.model_name();
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    let error_status = match (args.error_status, args.kind) {
        (0, SimKind::Anthropic) => 529,
        (0, _) => 503,
        (s, _) => s,
    };
    let mut faults = faults::Faults::new(
        args.seed,
        args.error_rate,
        error_status,
        args.hang_rate,
        args.drop_after,
        args.token_delay_ms,
    );
    faults.retry_after = Duration::from_millis(args.retry_after_ms);
    faults.error_after = args.error_event_after;
    let facts = pages::NodeFacts {
        model: model.clone(),
        max_num_seqs: args.max_num_seqs.max(1),
        num_gpu_blocks: args.num_gpu_blocks.max(1),
        block_size: args.block_size.max(1),
        prefix_caching: !args.no_prefix_caching,
        legacy_names: args.legacy_metrics,
    };
    let (engine, page) = if args.kind == SimKind::Vllm {
        let cfg = engine::EngineConfig {
            max_num_seqs: facts.max_num_seqs,
            num_gpu_blocks: facts.num_gpu_blocks,
            block_size: facts.block_size,
            prefill_us_per_token: args.prefill_us_per_token,
            itl_base_ms: args.itl_base_ms,
            itl_per_seq_ms: args.itl_per_seq_ms,
            prefix_caching: facts.prefix_caching,
        };
        let page = pages::page(args.engine, &facts);
        let (handle, task) = engine_loop::EngineHandle::spawn(cfg, page.clone());
        tasks.push(task);
        (Some(handle), Some(page))
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
        page,
        pacer,
        shutdown_rx,
    );
    state.reply = args.reply.clone();
    state.tool_call_args = args.tool_call_args.clone();
    state.aws = sigv4::AwsIdentity::from_args(&args);
    state.stream_exception = args.stream_exception.clone();
    state.google = match &args.gcp_service_account {
        Some(path) => Some(
            google_oauth::GoogleAccount::from_file(path)
                .map_err(|m| std::io::Error::new(std::io::ErrorKind::InvalidInput, m))?,
        ),
        None => None,
    };
    state.vertex_place = (args.gcp_project.clone(), args.gcp_location.clone());
    state.entra = entra::EntraApp::from_args(&args);
    if args.echo_credentials {
        let aws = state.aws.as_ref().map(|aws| aws.secret.clone());
        let google = state.google.as_ref().map(|account| account.key_line.clone());
        let entra = state.entra.as_ref().and_then(|app| app.client_secret.clone());
        state.echo = Some(echo::Echo::new([aws, google, entra].into_iter().flatten()));
    }
    state.batches =
        batch_store::BatchStore::new(Duration::from_millis(args.batch_delay_ms), args.batch_expire);
    let serves = match args.kind {
        SimKind::Vllm => routes::Serves::Node(args.engine, &facts),
        hosted => routes::Serves::Hosted(hosted),
    };
    let state = Arc::new(state);
    let app = routes::router(serves, Arc::clone(&state));
    let connections = Arc::new(tls::Connections::default());
    let ca_pem = if args.tls {
        let minted = tls::mint().map_err(std::io::Error::other)?;
        if let Some(path) = &args.tls_ca_out {
            std::fs::write(path, &minted.ca_pem)?;
        }
        let (limits, seen) = ((args.max_concurrent_streams, args.max_connections), Arc::clone(&connections));
        let stop = shutdown_tx.subscribe();
        tasks.push(tokio::spawn(tls::serve(listener, app, minted.server, limits.0, limits.1, seen, stop)));
        Some(minted.ca_pem)
    } else {
        tasks.push(tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "sim server stopped");
            }
        }));
        None
    };
    let (kind, engine, shutdown) = (args.kind, args.engine, shutdown_tx);
    Ok(SimHandle { addr, kind, engine, model, shutdown, tasks, state, ca_pem, connections })
}

/// Bind `args.listen`, serve until ctrl-c.
pub async fn run(args: SimArgs) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let (kind, tls_ca_out) = (args.kind, args.tls_ca_out.clone());
    let handle = spawn(args, listener).await?;
    match kind {
        SimKind::Vllm => {
            println!("spillway sim (vllm node, {} engine) listening on {}", handle.engine, handle.base_url())
        }
        _ => println!("spillway sim ({}) listening on {}", kind.as_str(), handle.base_url()),
    }
    if let (Some(pem), None) = (handle.ca_pem(), &tls_ca_out) {
        println!("trust this CA to reach it:\n{pem}");
    }
    tokio::signal::ctrl_c().await?;
    handle.shutdown();
    Ok(())
}
