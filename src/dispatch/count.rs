//! How many input tokens a request is for one backend, counted the way that backend counts:
//! Claude's own count route for an Anthropic, Bedrock or Vertex AI Claude backend, the model's `tokenizer.json` or a
//! public tokenizer where the config names one, and a labelled estimate otherwise. No
//! generation, so none of the dispatch walk's guards apply.

use std::time::Duration;

use super::Dispatcher;
use crate::adapter::provider;
use crate::adapter::{self, Call};
use crate::canonical::{ChatRequest, ErrorClass, UpstreamError};
use crate::config::BackendId;
use crate::snapshot::Snapshot;

/// A count, and whether it is exact (else an estimate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenCount {
    pub input_tokens: u32,
    pub exact: bool,
}

impl Dispatcher {
    /// Count `request`'s input tokens as `backend` would.
    pub async fn count_tokens(
        &self,
        snap: &Snapshot,
        backend: BackendId,
        request: &ChatRequest,
    ) -> Result<TokenCount, UpstreamError> {
        let view = &snap.backends[backend];
        if let (true, Some(node)) = (view.wire.counts_tokens(), view.nodes.first()) {
            let call = Call {
                model: &view.model,
                redactor: self.redactor.load_full(),
                ..Call::as_written(view.wire, self.upstream(snap, backend, &node.base_url), request)
            };
            // A count is one short call: it gets the time an answer's silence may last.
            let wait = Duration::from_millis(self.cfg.stream_idle_timeout_ms);
            let counted = tokio::time::timeout(wait, adapter::count_tokens(&self.transport, &call, request))
                .await
                .unwrap_or_else(|_| {
                    Err(UpstreamError::new(
                        ErrorClass::Timeout,
                        None,
                        format!("no count within {} ms", wait.as_millis()),
                    ))
                });
            return counted.map(|input_tokens| TokenCount { input_tokens, exact: true });
        }
        let counter = provider::counter(&snap.config.backends[backend]);
        Ok(TokenCount { input_tokens: counter.count_request(request), exact: counter.is_exact() })
    }
}
