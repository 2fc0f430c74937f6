//! What the hosted kinds have beside the keys every backend takes: the API's address, the
//! provider's per-minute quota and the model's version tag; `openai_compatible` may list
//! several base URLs instead of one, and `azure_openai` may name a legacy deployment.

use schemars::JsonSchema;
use serde::Deserialize;

/// The settings of an `openai`, `anthropic` or `gemini` backend (and, within
/// [`CompatibleSpec`], of an `openai_compatible` one).
#[derive(Debug, Clone, JsonSchema, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct HostedSpec {
    /// API base URL; defaults to the provider's public API (`openai`, `anthropic`, `gemini`).
    #[serde(default)]
    pub base_url: Option<String>,
    /// Per-minute limits, counted with this backend's tokenizer.
    #[serde(default)]
    pub quota: Option<Quota>,
    /// A version tag for the model behind `model` (e.g. a dated snapshot). With the model name
    /// it is the fingerprint the evaluation gate passes or fails; change it when the provider
    /// changes the model, and the gate runs again.
    #[serde(default)]
    pub version: Option<String>,
}

/// The settings of an `openai_compatible` backend: one `base_url`, or several `endpoints`.
#[derive(Debug, Clone, JsonSchema, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct CompatibleSpec {
    /// Base URLs of several nodes serving the model (each as a `base_url` would be).
    #[serde(default)]
    pub endpoints: Vec<String>,
    /// As a `vllm` backend's `messages`: `native` when the server has its own `/v1/messages`.
    #[serde(default)]
    pub messages: super::MessagesApi,
    /// `base_url`, `quota` and `version`, as the other hosted kinds have them.
    #[serde(flatten)]
    pub hosted: HostedSpec,
}

/// The settings of an `azure_openai` backend. With neither key, `base_url` is the resource's
/// v1 API (`https://NAME.openai.azure.com/openai/v1`) and `model` names the deployment; with
/// `deployment`, `base_url` is the resource (`https://NAME.openai.azure.com`) and calls go to
/// the legacy `/openai/deployments/{deployment}/...?api-version=` routes.
#[derive(Debug, Clone, JsonSchema, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct AzureSpec {
    /// A legacy deployment's name (needs `api_version`).
    #[serde(default)]
    pub deployment: Option<String>,
    /// The `api-version` sent with every call (e.g. `2024-10-21`); required with `deployment`,
    /// optional on the v1 API (`preview` for its preview features).
    #[serde(default)]
    pub api_version: Option<String>,
    /// `base_url` (required), `quota` and `version`, as the other hosted kinds have them.
    #[serde(flatten)]
    pub hosted: HostedSpec,
}

impl AzureSpec {
    /// Where the calls' paths (`chat/completions`, `embeddings`, ...) go below the resource.
    pub fn calls_base(&self) -> Option<String> {
        let base = self.hosted.base_url.as_deref()?.trim_end_matches('/');
        Some(match &self.deployment {
            Some(d) => format!("{base}/openai/deployments/{}", crate::config::path_segment(d)),
            None => base.to_string(),
        })
    }

    /// The query every call carries: the `api-version` written, if one is.
    pub fn query(&self) -> Option<String> {
        self.api_version.as_deref().map(|v| format!("api-version={}", crate::config::path_segment(v)))
    }
}

/// The settings of a `vertex` backend: where the model is served, and whose it is.
#[derive(Debug, Clone, JsonSchema, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct VertexSpec {
    /// The Google Cloud project the calls are billed to.
    pub project: String,
    /// The region serving the model (e.g. `us-east5`), or `global`; the policy region when
    /// `region` is not written.
    pub location: String,
    /// Whose model `model` is; by default `anthropic` for `claude-*` models and `google` for
    /// the rest.
    #[serde(default)]
    pub publisher: Option<Publisher>,
    /// A Google credentials file (service account or authorized user, JSON) for this backend
    /// alone, e.g. when backends bill different projects; relative paths are read from the
    /// config file's directory. Default: Application Default Credentials
    /// (`GOOGLE_APPLICATION_CREDENTIALS`, gcloud, the metadata server).
    #[serde(default)]
    pub credentials_file: Option<std::path::PathBuf>,
    /// `base_url` (default `https://{location}-aiplatform.googleapis.com`, or
    /// `https://aiplatform.googleapis.com` for `global`), `quota` and `version`.
    #[serde(flatten)]
    pub hosted: HostedSpec,
}

/// Whose model a Vertex backend serves, and so which wire it speaks.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Publisher {
    /// Claude, in Anthropic's Messages body (`:rawPredict`).
    Anthropic,
    /// Gemini (`:generateContent`).
    Google,
}

impl VertexSpec {
    /// The public API host of the location.
    pub fn default_host(&self) -> String {
        match self.location.as_str() {
            "global" => "https://aiplatform.googleapis.com".to_string(),
            location => format!("https://{location}-aiplatform.googleapis.com"),
        }
    }

    /// The publisher of `model`: as written, else by the model's name.
    pub fn publisher_of(&self, model: &str) -> Publisher {
        self.publisher.unwrap_or(if model.starts_with("claude") {
            Publisher::Anthropic
        } else {
            Publisher::Google
        })
    }

    /// Where the calls (`models/{model}:rawPredict`, ...) go below the host: the publisher's
    /// models in the project's location.
    pub fn calls_base(&self, host: &str, model: &str) -> String {
        let publisher = match self.publisher_of(model) {
            Publisher::Anthropic => "anthropic",
            Publisher::Google => "google",
        };
        let (project, location) =
            (crate::config::path_segment(&self.project), crate::config::path_segment(&self.location));
        format!("{host}/v1/projects/{project}/locations/{location}/publishers/{publisher}")
    }
}

/// Per-minute limits of a hosted backend.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    /// Requests per minute.
    #[serde(default)]
    pub rpm: Option<u64>,
    /// Tokens (input + output cap) per minute, in this backend's tokens.
    #[serde(default)]
    pub tpm: Option<u64>,
    /// Whether prompt tokens read from the provider's cache count toward `tpm` (tokens
    /// written to it always do). Default: as the provider counts them, false for kind
    /// anthropic (its input limits leave cache reads out), true for the others.
    #[serde(default)]
    pub count_cached_tokens: Option<bool>,
    /// How many tokens of `tpm` one output token uses (default 1). Bedrock burns five for each
    /// output token of Claude 4 models and later.
    #[serde(default)]
    pub output_token_weight: Option<u32>,
}
