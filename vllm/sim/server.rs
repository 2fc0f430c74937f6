//! Shared request handling for every simulated provider: state, auth, quota, faults, start.
//!
//! The wire modules decode a request into a `GenRequest`, then call `AppState::start`, which
//! applies the quota (hosted kinds), draws the fault plan, and starts the token producer (the
//! vLLM engine or the hosted pacer). Errors come back as a `SimError` that each wire renders
//! in its own provider's envelope; nothing here knows a wire format.

use super::batch_store::BatchStore;
use super::engine_loop::EngineHandle;
use super::faults::{Faults, FAULT_HEADER};
use super::generate::{output_len, GenRequest, Generation, HostedPacer, Usage};
use super::pages::Page;
use super::prompt_cache::BreakpointCache;
use super::quota::{Quota, Remaining};
use super::text::{self, TextGen};
use super::SimKind;
use axum::http::HeaderMap;
use serde_json::Value;
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, watch};

/// Hosted prompt caches work on 128-token blocks of prompts of at least 1024 tokens.
const HOSTED_CACHE_BLOCK: usize = 128;
const HOSTED_CACHE_MIN_TOKENS: u32 = 1024;

/// Request bodies kept for [`AppState::logged`].
const REQUEST_LOG: usize = 256;

/// An error to render in the provider's format.
#[derive(Clone, Debug)]
pub struct SimError {
    pub status: u16,
    pub message: String,
    /// How long the client is asked to wait (`Retry-After`, and Azure's millisecond headers).
    pub retry_after: Option<Duration>,
}

impl SimError {
    pub fn new(status: u16, message: impl Into<String>) -> SimError {
        SimError { status, message: message.into(), retry_after: None }
    }

    /// The wait as the providers send it: `Retry-After` in whole seconds (rounded up), and for
    /// Azure also `retry-after-ms` and `x-ms-retry-after-ms` as asked.
    pub fn put_retry_after(&self, kind: super::SimKind, headers: &mut axum::http::HeaderMap) {
        let Some(wait) = self.retry_after else { return };
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        headers.insert(axum::http::header::RETRY_AFTER, secs.into());
        if kind == super::SimKind::AzureOpenai {
            let ms = wait.as_millis() as u64;
            headers.insert("retry-after-ms", ms.into());
            headers.insert("x-ms-retry-after-ms", ms.into());
        }
    }
}

/// A started request.
pub struct Started {
    pub gen: Generation,
    pub remaining: Option<Remaining>,
    pub id: u64,
    /// Prompt-side usage as known at the start (cache figures are final for hosted kinds).
    pub usage: Usage,
    /// The answer is a call of this tool: its tokens are the pieces of the arguments' JSON.
    pub tool_call: Option<String>,
}

/// Everything a simulated server shares between requests.
pub struct AppState {
    pub kind: SimKind,
    pub model: String,
    pub seed: u64,
    pub api_key: Option<String>,
    pub output_tokens: u32,
    pub faults: Faults,
    pub quota: Quota,
    pub engine: Option<EngineHandle>,
    /// A self-hosted node's engine page (`--engine`).
    pub page: Option<Arc<dyn Page>>,
    pub pacer: HostedPacer,
    pub hosted_cache: Mutex<HashSet<u64>>,
    /// Anthropic's cache, which works from the request's breakpoints.
    pub breakpoint_cache: Mutex<BreakpointCache>,
    /// The last [`REQUEST_LOG`] Messages request bodies, oldest first.
    requests: Mutex<VecDeque<Value>>,
    /// The `traceparent` of the last [`REQUEST_LOG`] generation requests that had one.
    traceparents: Mutex<VecDeque<String>>,
    pub shutdown: watch::Receiver<bool>,
    pub created: u64,
    /// `--reply`: answer with exactly this text.
    pub reply: Option<String>,
    /// `--tool-call-args`: call the request's tool with these arguments.
    pub tool_call_args: Option<String>,
    ids: AtomicU64,
    /// Prometheus pages served (how often the node was scraped).
    pub pages_served: AtomicU64,
    /// The batch APIs' files and batches (`openai`, `anthropic` kinds).
    pub batches: BatchStore,
    /// Bedrock: the AWS identity a request's signature must be made with.
    pub aws: Option<super::sigv4::AwsIdentity>,
    /// Bedrock: `--stream-exception`.
    pub stream_exception: Option<String>,
    /// `--echo-credentials` ([`super::echo`]).
    pub echo: Option<super::echo::Echo>,
    /// Vertex: the service account whose tokens are accepted.
    pub google: Option<super::google_oauth::GoogleAccount>,
    /// Vertex: the project and location served.
    pub vertex_place: (String, String),
    /// Azure: the Entra application whose tokens are accepted.
    pub entra: Option<super::entra::EntraApp>,
}

impl AppState {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kind: SimKind,
        model: String,
        seed: u64,
        api_key: Option<String>,
        output_tokens: u32,
        faults: Faults,
        quota: Quota,
        engine: Option<EngineHandle>,
        page: Option<Arc<dyn Page>>,
        pacer: HostedPacer,
        shutdown: watch::Receiver<bool>,
    ) -> AppState {
        let created = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        AppState {
            kind,
            model,
            seed,
            api_key,
            output_tokens,
            faults,
            quota,
            engine,
            page,
            pacer,
            hosted_cache: Mutex::new(HashSet::new()),
            breakpoint_cache: Mutex::new(BreakpointCache::default()),
            requests: Mutex::new(VecDeque::new()),
            traceparents: Mutex::new(VecDeque::new()),
            shutdown,
            created,
            reply: None,
            tool_call_args: None,
            ids: AtomicU64::new(1),
            pages_served: AtomicU64::new(0),
            batches: BatchStore::default(),
            aws: None,
            stream_exception: None,
            echo: None,
            google: None,
            vertex_place: Default::default(),
            entra: None,
        }
    }

    /// Check a presented API key against `--api-key`, or a token the sim's Entra endpoint issued
    /// (401 when a key is set and neither matches).
    pub fn check_key(&self, presented: Option<&str>) -> Result<(), SimError> {
        let entra = |p: &str| self.entra.as_ref().is_some_and(|app| app.accepts(p));
        match (&self.api_key, presented) {
            (None, _) => Ok(()),
            (Some(k), Some(p)) if k == p || entra(p) => Ok(()),
            (Some(_), None) => Err(SimError::new(401, "missing API key")),
            (Some(_), Some(_)) => Err(SimError::new(401, "invalid API key")),
        }
    }

    /// A request's JSON body, kept for tests to read back ([`super::SimHandle::requests`]).
    pub fn read_json(&self, body: &[u8]) -> Result<Value, SimError> {
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| SimError::new(400, format!("invalid JSON body: {e}")))?;
        self.log(&v);
        Ok(v)
    }

    /// Keep a request's body for tests to read back ([`super::SimHandle::requests`]).
    pub fn log(&self, body: &Value) {
        let mut log = self.requests.lock().expect("request log");
        if log.len() == REQUEST_LOG {
            log.pop_front();
        }
        log.push_back(body.clone());
    }

    /// The `traceparent`s generation requests came with, oldest first.
    pub fn traceparents(&self) -> Vec<String> {
        self.traceparents.lock().expect("traceparent log").iter().cloned().collect()
    }

    /// The logged request bodies, oldest first.
    pub fn logged(&self) -> Vec<Value> {
        self.requests.lock().expect("request log").iter().cloned().collect()
    }

    /// Quota, faults, then start producing tokens for `req`.
    pub fn start(&self, headers: &HeaderMap, req: &GenRequest) -> Result<Started, SimError> {
        if let Some(traceparent) = headers.get("traceparent").and_then(|v| v.to_str().ok()) {
            let mut log = self.traceparents.lock().expect("traceparent log");
            if log.len() == REQUEST_LOG {
                log.pop_front();
            }
            log.push_back(traceparent.to_string());
        }
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let prompt_tokens = text::prompt_tokens(&req.prompt);
        let tool_call = req.tool.clone().filter(|_| self.tool_call_args.is_some());
        let fixed = match (&tool_call, &self.tool_call_args, &self.reply) {
            (Some(_), Some(args), _) => Some(TextGen::fixed(args)),
            (None, _, Some(reply)) => Some(TextGen::fixed(reply)),
            _ => None,
        };
        let (n, limited) = match fixed.as_ref().and_then(TextGen::fixed_len) {
            Some(len) => (len.max(1), false),
            None => output_len(self.output_tokens, req.max_tokens),
        };
        let remaining = if self.engine.is_none() {
            let estimate = prompt_tokens as u64 + req.max_tokens.unwrap_or(n) as u64;
            match self.quota.check(estimate, Instant::now()) {
                Ok(r) => Some(r),
                Err(e) => {
                    let what = if e.tokens { "tokens" } else { "requests" };
                    return Err(SimError {
                        status: 429,
                        message: format!("Rate limit reached for {what} per minute (simulated)"),
                        retry_after: Some(Duration::from_secs(e.retry_after_secs)),
                    });
                }
            }
        } else {
            None
        };
        let header = headers.get(FAULT_HEADER).and_then(|v| v.to_str().ok());
        let plan = self.faults.plan(header).map_err(|m| SimError::new(400, m))?;
        let echo = self.echo.as_ref().and_then(|e| e.of(headers));
        if let Some(status) = plan.status {
            return Err(SimError {
                status,
                message: super::echo::with(format!("simulated failure ({status})"), echo.as_deref()),
                retry_after: (status == 429).then_some(self.faults.retry_after),
            });
        }
        let gen_text = fixed.unwrap_or_else(|| TextGen::new(self.seed, &req.prompt));
        let ttft = plan.ttft_ms.map(Duration::from_millis);
        let mut start_usage = Usage { prompt_tokens, ..Usage::default() };
        let (rx, first_delay) = if plan.hang {
            let (_tx, rx) = mpsc::unbounded_channel();
            (rx, Duration::ZERO)
        } else if let Some(engine) = &self.engine {
            if !engine.fits(prompt_tokens, n) {
                return Err(SimError::new(
                    400,
                    format!(
                        "This model's maximum context length is exceeded ({prompt_tokens} prompt tokens)."
                    ),
                ));
            }
            let cfg = engine.config();
            let hashes =
                if cfg.prefix_caching { text::block_hashes(&req.prompt, cfg.block_size) } else { Vec::new() };
            (engine.submit(prompt_tokens, hashes, n, limited, gen_text), ttft.unwrap_or_default())
        } else {
            let usage = self.hosted_usage(prompt_tokens, req);
            start_usage = usage;
            (self.pacer.start(ttft, gen_text, n, limited, usage), Duration::ZERO)
        };
        let mut gen = Generation::new(prompt_tokens, rx, plan, first_delay, self.shutdown.clone());
        gen.echo = echo;
        Ok(Started { gen, remaining, id, usage: start_usage, tool_call })
    }

    /// Prompt-cache accounting for hosted kinds: Anthropic's from the request's
    /// breakpoints ([`BreakpointCache`]), the others' automatic, on 128-token blocks of
    /// prompts of at least 1024 tokens.
    fn hosted_usage(&self, prompt_tokens: u32, req: &GenRequest) -> Usage {
        let mut usage = Usage { prompt_tokens, ..Usage::default() };
        if self.kind.is_claude() {
            let mut cache = self.breakpoint_cache.lock().expect("breakpoint cache");
            let used = cache.account(&req.prompt, &req.cache_blocks);
            usage.cached_tokens = used.read.min(prompt_tokens);
            usage.cache_write_tokens = used.written.min(prompt_tokens - usage.cached_tokens);
            return usage;
        }
        if prompt_tokens < HOSTED_CACHE_MIN_TOKENS {
            return usage;
        }
        let hashes = text::block_hashes(&req.prompt, HOSTED_CACHE_BLOCK);
        let mut cache = self.hosted_cache.lock().expect("hosted cache");
        let hits = hashes.iter().take_while(|h| cache.contains(h)).count();
        cache.extend(hashes.iter().copied());
        usage.cached_tokens = (hits * HOSTED_CACHE_BLOCK) as u32;
        usage
    }
}
