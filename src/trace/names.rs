//! The attribute names spans carry, in one place: the OpenTelemetry GenAI semantic conventions
//! (`gen_ai.*`, `error.type`), the HTTP ones the server span has, and Spillway's own
//! (`spillway.*`); and the conventions' values for the router's operations and providers.
//! Only names, ids, counts and classes: never a prompt, an answer or a key.

use crate::canonical::Operation;

pub(crate) const OPERATION: &str = "gen_ai.operation.name";
pub(crate) const PROVIDER: &str = "gen_ai.provider.name";
pub(crate) const REQUEST_MODEL: &str = "gen_ai.request.model";
pub(crate) const RESPONSE_MODEL: &str = "gen_ai.response.model";
pub(crate) const INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
pub const OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
pub(crate) const CACHE_READ_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
pub(crate) const FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
pub(crate) const ERROR_TYPE: &str = "error.type";
/// `error.type` of an answer the client stopped reading (no error of the router's or the
/// upstream's: the span's status stays unset).
pub(crate) const CANCELLED: &str = "cancelled";

pub(crate) const TASK: &str = "spillway.task";
pub(crate) const BACKEND: &str = "spillway.backend";
pub(crate) const NODE: &str = "spillway.node";
pub(crate) const SPILL_REASON: &str = "spillway.spill_reason";
/// On a client span: which call of the request it is (1 for the first). On the server span:
/// how many calls were made.
pub(crate) const ATTEMPT: &str = "spillway.attempt";
pub(crate) const REQUEST_ID: &str = "spillway.request_id";

pub(crate) const HTTP_METHOD: &str = "http.request.method";
pub(crate) const HTTP_ROUTE: &str = "http.route";
pub(crate) const HTTP_STATUS: &str = "http.response.status_code";

/// `gen_ai.operation.name` for a request doing `operation`.
pub fn operation(operation: &Operation) -> &'static str {
    match operation {
        Operation::Chat => "chat",
        Operation::Completion(_) => "text_completion",
        Operation::Embedding(_) => "embeddings",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_have_the_conventions_names() {
        assert_eq!(operation(&Operation::Chat), "chat");
    }
}
