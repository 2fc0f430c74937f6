//! A backend as written: one YAML mapping whose `kind` decides which other keys it may have.
//!
//! Every key is read with its own type wherever it stands (`kind` need not come first, and a
//! problem inside a key keeps that key's path), then the kind takes its keys into its spec; a
//! key left over is one the kind does not take, refused with the kinds that do. Nothing is
//! buffered, so the YAML reads as it did when every key was one struct's. The schema says the
//! same: one closed branch per kind, each with the keys every kind takes beside its own.

use std::borrow::Cow;

use rust_decimal::Decimal;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{Deserializer, Error as _};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::pool::{default_gpu_count, default_max_running, default_reserve};
use super::{
    AgentAddress, AzureSpec, BackendConfig, BackendKind, BackendSpec, CapabilitiesConfig, CompatibleSpec,
    Discovery, EmbeddingSpace, EngineSetting, HostedSpec, MessagesApi, Pin, PoolSpec, Price, Publisher,
    Quota, Tokenizer, VertexSpec,
};
use crate::canonical::CachePlacement;
use crate::config::yes;

/// Every key any kind takes. A kind-specific key is `Some` when written (even as `~`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename = "BackendConfig")]
struct Written {
    name: String,
    kind: BackendKind,
    #[serde(default, deserialize_with = "given")]
    endpoints: Option<Vec<String>>,
    #[serde(default, deserialize_with = "given")]
    base_url: Option<Option<String>>,
    #[serde(default)]
    api_key_env: Option<String>,
    model: String,
    #[serde(default)]
    region: Option<String>,
    #[serde(default)]
    terms: crate::config::DataTerms,
    #[serde(default)]
    price: Option<Price>,
    #[serde(default)]
    max_inflight_per_node: Option<u32>,
    #[serde(default = "yes")]
    stream_upstream: bool,
    #[serde(default, deserialize_with = "given")]
    engine: Option<EngineSetting>,
    #[serde(default, deserialize_with = "given")]
    agent_port: Option<Option<u16>>,
    #[serde(default, deserialize_with = "given")]
    agent_address: Option<AgentAddress>,
    #[serde(default, deserialize_with = "given")]
    reserve: Option<f64>,
    #[serde(default, deserialize_with = "given")]
    max_running: Option<u32>,
    #[serde(default, deserialize_with = "given")]
    pin: Option<Option<Pin>>,
    #[serde(default, deserialize_with = "given")]
    discovery: Option<Option<Discovery>>,
    #[serde(default, deserialize_with = "given")]
    quota: Option<Option<Quota>>,
    #[serde(default)]
    tokenizer: Option<Tokenizer>,
    #[serde(default)]
    tokenizer_file: Option<std::path::PathBuf>,
    #[serde(default)]
    capabilities: CapabilitiesConfig,
    #[serde(default, deserialize_with = "given")]
    embedding_space: Option<Option<EmbeddingSpace>>,
    #[serde(default, deserialize_with = "given")]
    gpu_count: Option<u32>,
    #[serde(default, deserialize_with = "given")]
    gpu_hourly_usd: Option<Option<Decimal>>,
    #[serde(default, deserialize_with = "given")]
    version: Option<Option<String>>,
    #[serde(default, deserialize_with = "given")]
    messages: Option<MessagesApi>,
    #[serde(default, deserialize_with = "given")]
    prompt_cache: Option<CachePlacement>,
    #[serde(default, deserialize_with = "given")]
    deployment: Option<String>,
    #[serde(default, deserialize_with = "given")]
    api_version: Option<String>,
    #[serde(default, deserialize_with = "given")]
    project: Option<String>,
    #[serde(default, deserialize_with = "given")]
    location: Option<String>,
    #[serde(default, deserialize_with = "given")]
    publisher: Option<Publisher>,
    #[serde(default, deserialize_with = "given")]
    credentials_file: Option<std::path::PathBuf>,
}

/// A key that is there, whatever its value.
fn given<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// The keys only `local` takes.
const POOL_KEYS: &[&str] = &[
    "endpoints",
    "engine",
    "agent_port",
    "agent_address",
    "reserve",
    "max_running",
    "pin",
    "discovery",
    "gpu_count",
    "gpu_hourly_usd",
    "messages",
];

/// The keys every kind but `local` takes.
const HOSTED_KEYS: &[&str] = &["base_url", "quota", "version"];

/// The keys only `azure_openai` takes.
const AZURE_KEYS: &[&str] = &["deployment", "api_version"];

/// The keys only `vertex` takes.
const VERTEX_KEYS: &[&str] = &["project", "location", "publisher", "credentials_file"];

/// Whether a backend of `kind` takes the kind-specific key `key`.
pub(super) fn takes(kind: BackendKind, key: &str) -> bool {
    if key == "embedding_space" {
        return kind.speaks_openai();
    }
    if key == "prompt_cache" {
        return kind.serves_claude_natively();
    }
    match kind {
        BackendKind::Local => POOL_KEYS.contains(&key),
        BackendKind::OpenaiCompatible => {
            key == "endpoints" || key == "messages" || HOSTED_KEYS.contains(&key)
        }
        BackendKind::AzureOpenai => AZURE_KEYS.contains(&key) || HOSTED_KEYS.contains(&key),
        BackendKind::Vertex => VERTEX_KEYS.contains(&key) || HOSTED_KEYS.contains(&key),
        _ => HOSTED_KEYS.contains(&key),
    }
}

/// A key written on a backend whose kind does not take it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Misplaced {
    pub key: &'static str,
    pub message: String,
}

impl Misplaced {
    fn new(key: &'static str, kind: BackendKind) -> Misplaced {
        let takers: Vec<&str> =
            BackendKind::ALL.iter().filter(|k| takes(**k, key)).map(|k| k.as_str()).collect();
        let only = match takers.as_slice() {
            [one] => format!("only kind {one} takes it"),
            all => format!("only kinds {} take it", all.join(", ")),
        };
        let mut message = format!("`{key}` does not apply to kind {}; {only}", kind.as_str());
        if key == "base_url" && kind == BackendKind::Local {
            message.push_str(" (a local backend lists its nodes under endpoints)");
        }
        Misplaced { key, message }
    }
}

impl Written {
    /// The backend, or the first key its kind does not take.
    fn into_config(mut self) -> Result<BackendConfig, Misplaced> {
        let embedding_space =
            if self.kind.speaks_openai() { self.embedding_space.take().flatten() } else { None };
        let prompt_cache = match self.kind.serves_claude_natively() {
            true => Some(self.prompt_cache.take().unwrap_or_default()),
            false => None,
        };
        let spec = match self.kind {
            BackendKind::Local => BackendSpec::Local(self.take_pool()),
            BackendKind::Openai => BackendSpec::Openai(self.take_hosted()),
            BackendKind::Anthropic => BackendSpec::Anthropic(self.take_hosted()),
            BackendKind::Gemini => BackendSpec::Gemini(self.take_hosted()),
            BackendKind::OpenaiCompatible => BackendSpec::OpenaiCompatible(CompatibleSpec {
                endpoints: self.endpoints.take().unwrap_or_default(),
                messages: self.messages.take().unwrap_or_default(),
                hosted: self.take_hosted(),
            }),
            BackendKind::AzureOpenai => BackendSpec::AzureOpenai(AzureSpec {
                deployment: self.deployment.take(),
                api_version: self.api_version.take(),
                hosted: self.take_hosted(),
            }),
            BackendKind::Bedrock => BackendSpec::Bedrock(self.take_hosted()),
            BackendKind::Vertex => BackendSpec::Vertex(VertexSpec {
                project: self.project.take().unwrap_or_default(),
                location: self.location.take().unwrap_or_default(),
                publisher: self.publisher.take(),
                credentials_file: self.credentials_file.take(),
                hosted: self.take_hosted(),
            }),
        };
        if let Some(key) = self.left_over() {
            return Err(Misplaced::new(key, self.kind));
        }
        Ok(BackendConfig {
            name: self.name,
            api_key_env: self.api_key_env,
            model: self.model,
            // A Vertex backend's location is where it runs, unless `region` says otherwise.
            region: self.region.or_else(|| match &spec {
                BackendSpec::Vertex(v) if !v.location.is_empty() => Some(v.location.clone()),
                _ => None,
            }),
            terms: self.terms,
            price: self.price,
            max_inflight_per_node: self.max_inflight_per_node,
            stream_upstream: self.stream_upstream,
            tokenizer: self.tokenizer,
            tokenizer_file: self.tokenizer_file,
            tokenizer_loaded: None,
            capabilities: self.capabilities,
            embedding_space,
            prompt_cache,
            spec,
        })
    }

    fn take_pool(&mut self) -> PoolSpec {
        PoolSpec {
            endpoints: self.endpoints.take().unwrap_or_default(),
            engine: self.engine.take().unwrap_or_default(),
            agent_port: self.agent_port.take().flatten(),
            agent_address: self.agent_address.take().unwrap_or_default(),
            reserve: self.reserve.take().unwrap_or_else(default_reserve),
            max_running: self.max_running.take().unwrap_or_else(default_max_running),
            pin: self.pin.take().flatten(),
            discovery: self.discovery.take().flatten(),
            gpu_count: self.gpu_count.take().unwrap_or_else(default_gpu_count),
            gpu_hourly_usd: self.gpu_hourly_usd.take().flatten(),
            messages: self.messages.take().unwrap_or_default(),
        }
    }

    fn take_hosted(&mut self) -> HostedSpec {
        HostedSpec {
            base_url: self.base_url.take().flatten(),
            quota: self.quota.take().flatten(),
            version: self.version.take().flatten(),
        }
    }

    /// The first kind-specific key the kind did not take, in the order the keys are declared.
    fn left_over(&self) -> Option<&'static str> {
        [
            ("endpoints", self.endpoints.is_some()),
            ("base_url", self.base_url.is_some()),
            ("engine", self.engine.is_some()),
            ("agent_port", self.agent_port.is_some()),
            ("agent_address", self.agent_address.is_some()),
            ("reserve", self.reserve.is_some()),
            ("max_running", self.max_running.is_some()),
            ("pin", self.pin.is_some()),
            ("discovery", self.discovery.is_some()),
            ("quota", self.quota.is_some()),
            ("gpu_count", self.gpu_count.is_some()),
            ("gpu_hourly_usd", self.gpu_hourly_usd.is_some()),
            ("version", self.version.is_some()),
            ("messages", self.messages.is_some()),
            ("embedding_space", self.embedding_space.is_some()),
            ("prompt_cache", self.prompt_cache.is_some()),
            ("deployment", self.deployment.is_some()),
            ("api_version", self.api_version.is_some()),
            ("project", self.project.is_some()),
            ("location", self.location.is_some()),
            ("publisher", self.publisher.is_some()),
            ("credentials_file", self.credentials_file.is_some()),
        ]
        .into_iter()
        .find_map(|(key, set)| set.then_some(key))
    }
}

/// Why a backend did not decode.
#[derive(Debug)]
pub enum Refusal {
    /// A wrong type, an unknown or missing key: serde's error, with its path in the backend.
    Serde(serde_path_to_error::Error<serde_yaml_ng::Error>),
    /// A key the kind does not take, at the backend's top level.
    Misplaced(Misplaced),
}

/// Decode one backend from its YAML tree, every problem with its path inside the backend:
/// what [`BackendConfig`]'s `Deserialize` does, except that a key the kind does not take is
/// named as a path (there, only in the message).
pub fn decode(value: serde_yaml_ng::Value) -> Result<BackendConfig, Refusal> {
    serde_path_to_error::deserialize::<_, Written>(value)
        .map_err(Refusal::Serde)?
        .into_config()
        .map_err(Refusal::Misplaced)
}

impl<'de> Deserialize<'de> for BackendConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Written::deserialize(d)?.into_config().map_err(|m| D::Error::custom(m.message))
    }
}

/// Each kind's branch: its spec's keys and `kind` as one of its kinds. [`by_kind`] puts the
/// keys every kind takes beside them.
impl JsonSchema for BackendSpec {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "BackendSpec".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let kinds = BackendKind::json_schema(generator);
        let space = embedding_space(generator);
        let with_space = |mut spec: Value| {
            if let Some(properties) = spec.get_mut("properties").and_then(Value::as_object_mut) {
                properties.insert("embedding_space".into(), space.clone());
            }
            spec
        };
        let cache = prompt_cache(generator);
        let with_cache = |mut spec: Value| {
            if let Some(properties) = spec.get_mut("properties").and_then(Value::as_object_mut) {
                properties.insert("prompt_cache".into(), cache.clone());
            }
            spec
        };
        let hosted = HostedSpec::json_schema(generator);
        let branches = [
            with_space(branch(&kinds, &[BackendKind::Local], PoolSpec::json_schema(generator))),
            with_space(branch(&kinds, &[BackendKind::Openai], hosted.clone())),
            with_cache(branch(&kinds, &[BackendKind::Anthropic], hosted.clone())),
            branch(&kinds, &[BackendKind::Gemini], hosted),
            with_space(branch(
                &kinds,
                &[BackendKind::OpenaiCompatible],
                CompatibleSpec::json_schema(generator),
            )),
            with_space(branch(&kinds, &[BackendKind::AzureOpenai], AzureSpec::json_schema(generator))),
            with_cache(branch(&kinds, &[BackendKind::Bedrock], HostedSpec::json_schema(generator))),
            with_cache(branch(&kinds, &[BackendKind::Vertex], VertexSpec::json_schema(generator))),
        ];
        json_schema!({ "oneOf": branches })
    }
}

/// The schema of `embedding_space`, which only the kinds that speak OpenAI's wire take.
fn embedding_space(generator: &mut SchemaGenerator) -> Value {
    let mut schema = <Option<EmbeddingSpace>>::json_schema(generator).to_value();
    if let Some(object) = schema.as_object_mut() {
        object.insert(
            "description".into(),
            concat!(
                "The vector space of this backend's embeddings (a name you choose, such as the embedding ",
                "model's): only backends that declare one serve /v1/embeddings, and a task's backends must ",
                "all declare the same"
            )
            .into(),
        );
    }
    schema
}

/// The schema of `prompt_cache`, which only the kinds serving Claude in Anthropic's body take.
fn prompt_cache(generator: &mut SchemaGenerator) -> Value {
    let mut schema = CachePlacement::json_schema(generator).to_value();
    if let Some(object) = schema.as_object_mut() {
        object.insert(
            "description".into(),
            concat!(
                "Where Spillway places prompt-cache breakpoints (cache_control) in requests that carry none ",
                "of the client's own, at most 4: the last tool, the system prompt, the last N user turns. ",
                "On by default; all off (system: false, tools: false, last_turns: 0) places none"
            )
            .into(),
        );
    }
    schema
}

/// `spec` with `kind` added as a required key that is one of `of`: `kinds` (BackendKind's
/// schema) cut down to them.
fn branch(kinds: &Schema, of: &[BackendKind], spec: Schema) -> Value {
    let names: Vec<Value> = of.iter().flat_map(|k| k.names()).map(|n| Value::from(*n)).collect();
    let mut kind = kinds.as_value().clone();
    let listed = |v: &Value| v.get("const").or_else(|| v.get("enum").and_then(|e| e.get(0))).is_some();
    match kind.get_mut("oneOf").and_then(Value::as_array_mut) {
        Some(variants) if variants.iter().all(listed) => {
            variants.retain(|v| v.get("const").is_some_and(|c| names.contains(c)));
            // Older names (serde aliases) are not in the derived schema.
            let missing: Vec<&Value> =
                names.iter().filter(|n| !variants.iter().any(|v| v.get("const") == Some(*n))).collect();
            for name in missing {
                variants.push(
                    serde_json::json!({ "const": name, "description": "An older name of the kind above" }),
                );
            }
        }
        _ => kind = serde_json::json!({ "type": "string", "enum": names }),
    }
    if let Some(kind) = kind.as_object_mut() {
        kind.insert(
            "description".into(),
            "What it is: a pool of self-hosted nodes or a hosted API, and its wire format".into(),
        );
    }
    let mut spec = spec.to_value();
    let object = spec.as_object_mut().expect("a spec is an object schema");
    let of: Vec<&str> = of.iter().map(|k| k.as_str()).collect();
    object.insert("description".into(), format!("A backend of kind {}", of.join(", ")).into());
    object.entry("properties").or_insert_with(|| Value::Object(Map::new()))["kind"] = kind;
    match object.get_mut("required").and_then(Value::as_array_mut) {
        Some(required) => required.insert(0, "kind".into()),
        None => {
            object.insert("required".into(), serde_json::json!(["kind"]));
        }
    }
    spec
}

/// `#[schemars(transform)]` of [`BackendConfig`]: its properties (the keys every kind takes)
/// and their required keys go into each branch of its `spec` property, which takes their place:
/// one closed object per kind (`additionalProperties: false` sees only its own object's keys).
pub(super) fn by_kind(schema: &mut Schema) {
    let Some(object) = schema.as_object_mut() else { return };
    let Some(Value::Object(mut common)) = object.remove("properties") else { return };
    let Some(mut spec) = common.remove("spec") else { return };
    let required: Vec<Value> = match object.remove("required") {
        Some(Value::Array(keys)) => keys.into_iter().filter(|k| k != "spec").collect(),
        _ => Vec::new(),
    };
    object.remove("additionalProperties");
    let Some(Value::Array(branches)) = spec.get_mut("oneOf").map(Value::take) else { return };
    let branches: Vec<Value> = branches
        .into_iter()
        .map(|mut branch| {
            let b = branch.as_object_mut().expect("a branch is an object schema");
            let own = b.remove("required").and_then(|r| r.as_array().cloned()).unwrap_or_default();
            let mut keys = required.clone();
            keys.extend(own.into_iter().filter(|k| !required.contains(k)));
            b.insert("required".into(), Value::Array(keys));
            let properties = b.entry("properties").or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(properties) = properties {
                properties.extend(common.clone());
            }
            b.insert("additionalProperties".into(), false.into());
            branch
        })
        .collect();
    object.insert("oneOf".into(), Value::Array(branches));
}
