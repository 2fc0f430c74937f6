//! The flags of `spillway sim` (which backend, its sizing and speed, its faults) and the
//! checks between them: kept apart from the lifecycle in `mod.rs`. `--engine` is the typed
//! [`Engine`] of the router's engine readers, so a sim and a reader never disagree on a name.

use crate::fleet::engines::Engine;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Parser;
use std::net::SocketAddr;

/// Which backend to simulate.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SimKind {
    Vllm,
    #[value(name = "openai")]
    OpenAi,
    Anthropic,
    Gemini,
    /// Azure OpenAI: the v1 API under `/openai/v1` and legacy deployments, `api-key` checked,
    /// `--model` the deployment's name.
    #[value(name = "azure_openai")]
    AzureOpenai,
    /// Amazon Bedrock: Claude through InvokeModel (`/model/{model}/invoke`,
    /// `/invoke-with-response-stream` in event-stream frames), the request's SigV4 signature
    /// checked against `--aws-access-key-id` / `--aws-secret-access-key` (or `--api-key` as a
    /// Bedrock API key).
    Bedrock,
    /// Google Vertex AI: Claude through rawPredict and Gemini through generateContent below a
    /// project and location, with bearer tokens from its own OAuth endpoint (`/token`), where a
    /// JWT signed by `--gcp-service-account`'s key is exchanged.
    Vertex,
}

impl SimKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SimKind::Vllm => "vllm",
            SimKind::OpenAi => "openai",
            SimKind::Anthropic => "anthropic",
            SimKind::Gemini => "gemini",
            SimKind::AzureOpenai => "azure_openai",
            SimKind::Bedrock => "bedrock",
            SimKind::Vertex => "vertex",
        }
    }

    /// The model served when `--model` is not given.
    pub fn default_model(self) -> &'static str {
        match self {
            SimKind::Vllm => "meta-llama/Llama-3.1-8B-Instruct",
            SimKind::OpenAi => "gpt-4o-mini",
            SimKind::Anthropic => "claude-3-5-haiku-latest",
            SimKind::Gemini => "gemini-2.0-flash",
            SimKind::AzureOpenai => "gpt-4o-mini",
            SimKind::Bedrock => "us.anthropic.claude-sonnet-4-6-v1:0",
            SimKind::Vertex => "claude-sonnet-4-6",
        }
    }

    /// Claude (Anthropic or a cloud): it signs its thinking, refuses a thinking block without a
    /// signature, and caches prompts at their `cache_control` breakpoints.
    pub fn is_claude(self) -> bool {
        matches!(self, SimKind::Anthropic | SimKind::Bedrock | SimKind::Vertex)
    }
}

/// `--engine`: one of [`Engine::name`], parsed into the engine.
fn engine_parser() -> impl TypedValueParser<Value = Engine> {
    PossibleValuesParser::new(Engine::ALL.map(Engine::name))
        .map(|name| Engine::from_name(&name).expect("only engine names are accepted"))
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

    /// vllm: the serving engine the node presents itself as, over the same model and
    /// OpenAI-compatible API: that engine's metric names, metrics path (trtllm:
    /// /prometheus/metrics, JSON iteration stats on /metrics) and identity endpoint (/version:
    /// vllm, trtllm; /props: llamacpp; /info: tgi). Refused for hosted kinds.
    #[arg(long, value_parser = engine_parser(), default_value = "vllm")]
    pub engine: Engine,
    /// vllm: most sequences running at once (llamacpp: its slots).
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
    /// vllm engine: expose V0-era metric names (gpu_cache_usage_perc, time_per_output_token_seconds).
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
    /// End every answer with the provider's in-band error event after this many tokens (0:
    /// before the first); an answer asked for whole gets the error whole.
    #[arg(long)]
    pub error_event_after: Option<u32>,
    /// Quote back, in every error this sim writes, the credentials the request carried (whole
    /// and cut short) and those the sim holds to check them: a careless upstream.
    #[arg(long)]
    pub echo_credentials: bool,
    /// Extra delay before every token, in ms.
    #[arg(long, default_value_t = 0)]
    pub token_delay_ms: u64,
    /// The wait a failure with status 429 asks for, in ms (`Retry-After` in whole seconds,
    /// rounded up; azure_openai also sends `retry-after-ms` and `x-ms-retry-after-ms`).
    #[arg(long, default_value_t = 1000)]
    pub retry_after_ms: u64,

    /// bedrock: the access key id a SigV4 signature must name (with `--aws-secret-access-key`).
    #[arg(long)]
    pub aws_access_key_id: Option<String>,
    /// bedrock: the secret key signatures are checked with.
    #[arg(long)]
    pub aws_secret_access_key: Option<String>,
    /// bedrock: a session token the request must carry (`x-amz-security-token`) and sign.
    #[arg(long)]
    pub aws_session_token: Option<String>,
    /// bedrock: the region this endpoint serves; a signature scoped to another is refused.
    #[arg(long, default_value = "us-east-1")]
    pub aws_region: String,
    /// bedrock: open every streamed answer (HTTP 200) with an exception frame of this type
    /// (e.g. `modelStreamErrorException`) instead of its first event.
    #[arg(long)]
    pub stream_exception: Option<String>,

    /// azure_openai: the Entra tenant whose token endpoint (`/{tenant}/oauth2/v2.0/token`) the
    /// sim serves, with `--entra-client-id`; its tokens are accepted beside the `api-key`.
    #[arg(long)]
    pub entra_tenant_id: Option<String>,
    /// azure_openai: the application's client id.
    #[arg(long)]
    pub entra_client_id: Option<String>,
    /// azure_openai: the application's client secret.
    #[arg(long)]
    pub entra_client_secret: Option<String>,
    /// azure_openai: the federated token a workload identity presents as its assertion.
    #[arg(long)]
    pub entra_federated_token: Option<String>,
    /// vertex: the service-account file (JSON) whose key signs the JWTs `/token` exchanges;
    /// without it, any bearer token is accepted.
    #[arg(long)]
    pub gcp_service_account: Option<std::path::PathBuf>,
    /// vertex: the project served.
    #[arg(long, default_value = "sim-project")]
    pub gcp_project: String,
    /// vertex: the location served (a region, or `global`).
    #[arg(long, default_value = "us-east5")]
    pub gcp_location: String,

    /// openai, anthropic: how long a batch waits before its requests are answered, in ms.
    #[arg(long, default_value_t = 200)]
    pub batch_delay_ms: u64,
    /// openai, anthropic: batches expire (every request `expired`) instead of completing.
    #[arg(long)]
    pub batch_expire: bool,

    /// Answer with exactly this text (streamed in pieces of a few characters) instead of
    /// generated words.
    #[arg(long)]
    pub reply: Option<String>,
    /// When a request declares tools and its last message is not a tool result, answer by
    /// calling the tool `tool_choice` names (else the first declared) with these JSON
    /// arguments, streamed in pieces in the provider's own format.
    #[arg(long)]
    pub tool_call_args: Option<String>,

    /// Serve HTTPS (HTTP/2 and HTTP/1.1 by ALPN) with a certificate for 127.0.0.1 and
    /// localhost signed by a CA made at start; its PEM is written to `--tls-ca-out` or printed.
    #[arg(long)]
    pub tls: bool,
    /// With `--tls`: write the CA certificate (PEM) the client must trust to this file.
    #[arg(long)]
    pub tls_ca_out: Option<std::path::PathBuf>,
    /// With `--tls`: the most concurrent HTTP/2 streams per connection the server advertises
    /// (`SETTINGS_MAX_CONCURRENT_STREAMS`), as OpenAI, Anthropic and Google advertise 100.
    #[arg(long, default_value_t = 100)]
    pub max_concurrent_streams: u32,
    /// With `--tls`: the most connections open at once; one more waits to be accepted (0: no
    /// limit).
    #[arg(long, default_value_t = 0)]
    pub max_connections: usize,
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

    /// Flags that contradict each other: `--engine` describes a self-hosted node only.
    pub fn check(&self) -> Result<(), String> {
        if self.kind != SimKind::Vllm && self.engine != Engine::Vllm {
            return Err(format!(
                "--engine {} needs --kind vllm: a serving engine belongs to a self-hosted node, and --kind {} simulates a hosted provider",
                self.engine,
                self.kind.as_str()
            ));
        }
        Ok(())
    }
}

impl Default for SimArgs {
    fn default() -> SimArgs {
        SimArgs::for_kind(SimKind::Vllm, SimKind::Vllm.default_model())
    }
}
