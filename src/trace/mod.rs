//! OpenTelemetry traces: one server span per API request and one client span per upstream
//! call, with the GenAI semantic conventions' attributes and Spillway's own (task, backend,
//! node, spill reason, attempt), exported over OTLP/HTTP protobuf in batches. Off unless the
//! standard `OTEL_EXPORTER_OTLP_*` variables name an endpoint ([`Settings`]); when off, no
//! exporter runs, no span is made and no `traceparent` goes upstream.
//!
//! A client's W3C `traceparent` is the request span's parent; each call's span goes upstream
//! as the call's `traceparent`. Spans carry names, ids, counts and classes: never a prompt,
//! an answer, a key or an export header. The provider is the router's own (never the
//! process-global one), so routers in one process trace apart.

mod answer;
mod export;
mod names;
mod propagation;
mod settings;
mod span;

use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;

pub use answer::Answer;
pub use propagation::parent;
pub use settings::Settings;
pub use span::{AttemptSpan, RequestSpan, Target};

/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The router's tracing: on (a provider exporting in batches) or off. Clones share it.
#[derive(Clone, Default)]
pub struct Tracing {
    on: Option<Arc<On>>,
}

struct On {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Tracing {
    pub fn off() -> Tracing {
        Tracing::default()
    }

    /// Start exporting as `settings` say (nothing when they say off). The sampler follows
    /// `OTEL_TRACES_SAMPLER` (default: the parent's decision, else always), the batches
    /// `OTEL_BSP_*`, the export headers `OTEL_EXPORTER_OTLP_(TRACES_)HEADERS`.
    pub fn start(settings: &Settings) -> Result<Tracing, String> {
        let Some(endpoint) = &settings.endpoint else {
            return Ok(Tracing::off());
        };
        let client = export::Client::new(EXPORT_TIMEOUT).map_err(|e| format!("tracing: {e}"))?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(endpoint.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| format!("tracing: the OTLP exporter: {e}"))?;
        let resource = Resource::builder().with_service_name(settings.service_name.clone()).build();
        let provider =
            SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
        let tracer = provider.tracer("spillway");
        tracing::info!(
            endpoint = settings.shown_endpoint().unwrap_or_default(),
            service = %settings.service_name,
            "exporting traces over OTLP/HTTP"
        );
        Ok(Tracing { on: Some(Arc::new(On { provider, tracer })) })
    }

    pub fn is_on(&self) -> bool {
        self.on.is_some()
    }

    /// A server span for a request to `route` with `headers` (a child of the client's span
    /// when its `traceparent` is valid); `None` when tracing is off.
    pub fn request(&self, headers: &HeaderMap, method: &str, route: &str) -> Option<RequestSpan> {
        let on = self.on.as_ref()?;
        Some(RequestSpan::start(&on.tracer, parent(headers), method, route))
    }

    /// Export what is queued and stop. Blocking work, done off the runtime's threads.
    pub async fn shutdown(&self) {
        let Some(on) = self.on.clone() else { return };
        let stopped = tokio::task::spawn_blocking(move || on.provider.shutdown()).await;
        match stopped {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("tracing: the last spans may not have been exported: {e}"),
            Err(e) => tracing::warn!("tracing: shutdown failed: {e}"),
        }
    }
}
