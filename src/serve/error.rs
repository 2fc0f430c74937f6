//! Every error a client sees, typed: what it is (its HTTP status, its OpenAI `type` and
//! `code`) is one table, [`ErrorCode::table`]; a call site picks the variant and writes the
//! message. How each dialect writes it on the wire (OpenAI's envelope, Anthropic's) is the
//! front doors' (`api::error`, `api::messages::error`).

use crate::canonical::{ErrorClass, UpstreamError};
use crate::guard::budget::{Limit, ScopeKind};

/// Every kind of error Spillway answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    // The request itself.
    /// A request the client must change, with no finer code.
    InvalidRequest,
    InvalidJson,
    InvalidType,
    InvalidValue,
    MissingField,
    InvalidBody,
    RequestTooLarge,
    BodyTimeout,
    UnsupportedMediaType,
    ContextLengthExceeded,
    UnsupportedCapability,
    ContentPolicyViolation,
    ModelNotFound,
    // Who is asking.
    InvalidApiKey,
    /// The key may not use this task.
    PermissionDenied,
    // Capacity.
    RouterOverloaded,
    Shed,
    UpstreamRateLimited,
    NoEligibleBackend,
    RetryBudgetExhausted,
    AllBackendsFailed,
    // An upstream's failure passed on.
    /// The upstream refused the request as the client's fault (its own 4xx status is kept).
    UpstreamRejected,
    UpstreamAuth,
    Timeout,
    /// Any other upstream failure, coded by its class.
    Upstream(ErrorClass),
    // Key limits and budgets (`budgets:`), never retried or failed over.
    /// Over a USD budget (402) or a rate limit (429) of the key's or team's.
    OverLimit(ScopeKind, Limit),
    /// Redis is down and `budgets.when_redis_down` is `closed` for budgets (`true`) or rate
    /// limits.
    LimitStateUnavailable {
        budget: bool,
    },
    /// A code only a route outside the pipeline answers with (the admin API's, a missing
    /// route's), defined beside that route (`api::codes`).
    Route(&'static RouteCode),
}

/// A row of the error table that a route outside the pipeline adds: its status, OpenAI `type`
/// and `code`, and when it is answered (the reference's wording).
#[derive(Debug, PartialEq, Eq)]
pub struct RouteCode {
    pub status: u16,
    pub kind: &'static str,
    pub code: &'static str,
    pub when: &'static str,
}

/// The `code` of a refusal by a key's or team's limit: `budget_exceeded:SCOPE:LIMIT` for a USD
/// budget, `rate_limited:SCOPE:LIMIT` for the others.
pub fn limit_code(scope: ScopeKind, limit: Limit) -> &'static str {
    use Limit::*;
    match (scope, limit) {
        (ScopeKind::Key, UsdPerDay) => "budget_exceeded:key:usd_per_day",
        (ScopeKind::Key, UsdPerMonth) => "budget_exceeded:key:usd_per_month",
        (ScopeKind::Key, Rpm) => "rate_limited:key:rpm",
        (ScopeKind::Key, Tpm) => "rate_limited:key:tpm",
        (ScopeKind::Key, Concurrent) => "rate_limited:key:concurrent",
        (ScopeKind::Team, UsdPerDay) => "budget_exceeded:team:usd_per_day",
        (ScopeKind::Team, UsdPerMonth) => "budget_exceeded:team:usd_per_month",
        (ScopeKind::Team, Rpm) => "rate_limited:team:rpm",
        (ScopeKind::Team, Tpm) => "rate_limited:team:tpm",
        (ScopeKind::Team, Concurrent) => "rate_limited:team:concurrent",
    }
}

impl ErrorCode {
    /// Every code the pipeline and the dialects' doors answer with, each once, in the order of
    /// the reference's table (by status); the routes outside the pipeline list theirs
    /// (`api::codes::ALL`). The reference's test gives each a meaning in a match, so a new
    /// variant fails to compile there until it has one: list it here too.
    pub fn all() -> Vec<ErrorCode> {
        use ErrorCode::*;
        let mut all = vec![
            InvalidRequest,
            InvalidJson,
            InvalidType,
            InvalidValue,
            MissingField,
            InvalidBody,
            ContextLengthExceeded,
            UnsupportedCapability,
            ContentPolicyViolation,
            UpstreamRejected,
            InvalidApiKey,
            PermissionDenied,
            ModelNotFound,
            BodyTimeout,
            RequestTooLarge,
            UnsupportedMediaType,
            RouterOverloaded,
            Shed,
            UpstreamRateLimited,
        ];
        let scopes = [ScopeKind::Key, ScopeKind::Team];
        let limits = |budget: bool| {
            scopes.into_iter().flat_map(move |s| {
                Limit::ALL.into_iter().filter(move |l| l.is_budget() == budget).map(move |l| OverLimit(s, l))
            })
        };
        all.extend(limits(true));
        all.extend(limits(false));
        all.extend([
            UpstreamAuth,
            Upstream(ErrorClass::RateLimited),
            Upstream(ErrorClass::Overloaded),
            Upstream(ErrorClass::ServerError),
            Upstream(ErrorClass::Connect),
            Upstream(ErrorClass::StreamBroken),
            Upstream(ErrorClass::InvalidOutput),
            NoEligibleBackend,
            RetryBudgetExhausted,
            AllBackendsFailed,
            LimitStateUnavailable { budget: true },
            LimitStateUnavailable { budget: false },
            Timeout,
        ]);
        all
    }

    /// The status, OpenAI error `type` and `code` of each kind of error.
    pub fn table(self) -> (u16, &'static str, Option<&'static str>) {
        use ErrorCode::*;
        const INVALID: &str = "invalid_request_error";
        const UNAVAILABLE: &str = "service_unavailable";
        const RATE: &str = "rate_limit_error";
        const AUTH: &str = "authentication_error";
        const UPSTREAM: &str = "upstream_error";
        match self {
            InvalidRequest => (400, INVALID, None),
            InvalidJson => (400, INVALID, Some("invalid_json")),
            InvalidType => (400, INVALID, Some("invalid_type")),
            InvalidValue => (400, INVALID, Some("invalid_value")),
            MissingField => (400, INVALID, Some("missing_field")),
            InvalidBody => (400, INVALID, Some("invalid_body")),
            RequestTooLarge => (413, INVALID, Some("request_too_large")),
            BodyTimeout => (408, INVALID, Some("body_timeout")),
            UnsupportedMediaType => (415, INVALID, Some("unsupported_media_type")),
            ContextLengthExceeded => (400, INVALID, Some("context_length_exceeded")),
            UnsupportedCapability => (400, INVALID, Some("unsupported_capability")),
            ContentPolicyViolation => (400, INVALID, Some("content_policy_violation")),
            ModelNotFound => (404, INVALID, Some("model_not_found")),
            InvalidApiKey => (401, AUTH, Some("invalid_api_key")),
            PermissionDenied => (403, "permission_error", None),
            RouterOverloaded => (429, RATE, Some("router_overloaded")),
            Shed => (429, RATE, Some("shed")),
            UpstreamRateLimited => (429, RATE, Some("upstream_rate_limited")),
            NoEligibleBackend => (503, UNAVAILABLE, Some("no_eligible_backend")),
            RetryBudgetExhausted => (503, UNAVAILABLE, Some("retry_budget_exhausted")),
            AllBackendsFailed => (503, UNAVAILABLE, Some("all_backends_failed")),
            UpstreamRejected => (400, INVALID, None),
            UpstreamAuth => (502, UPSTREAM, Some("upstream_auth")),
            Timeout => (504, "timeout", Some("timeout")),
            Upstream(class) => (502, UPSTREAM, Some(class.as_str())),
            OverLimit(scope, limit) if limit.is_budget() => {
                (402, "billing_error", Some(limit_code(scope, limit)))
            }
            OverLimit(scope, limit) => (429, RATE, Some(limit_code(scope, limit))),
            LimitStateUnavailable { budget: true } => (503, UNAVAILABLE, Some("budget_state_unavailable")),
            LimitStateUnavailable { budget: false } => {
                (503, UNAVAILABLE, Some("rate_limit_state_unavailable"))
            }
            Route(row) => (row.status, row.kind, Some(row.code)),
        }
    }

    /// The `code` member of the envelope.
    pub fn as_str(self) -> Option<&'static str> {
        self.table().2
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: ErrorCode,
    /// The table's HTTP status, except for an upstream's own 4xx passed on.
    pub status: u16,
    pub param: Option<String>,
    pub message: String,
    pub retry_after_secs: Option<u64>,
    /// For an upstream's failure passed on: the upstream's own message, for dialects whose
    /// clients match on the provider's wording (Anthropic's).
    pub upstream_message: Option<String>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        let status = code.table().0;
        ApiError {
            code,
            status,
            param: None,
            message: message.into(),
            retry_after_secs: None,
            upstream_message: None,
        }
    }

    /// The same error under another code (its status from the table).
    pub fn code(mut self, code: ErrorCode) -> Self {
        self.code = code;
        self.status = code.table().0;
        self
    }

    pub fn param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after_secs = Some(secs);
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }

    /// The refusal's log line, written as it is answered in any dialect: status, type, code,
    /// the field at fault and why. Messages name fields and the values checked, never a key.
    pub fn log(&self) {
        let (_, kind, code) = self.code.table();
        let status = self.status;
        let param = self.param.as_deref();
        if status >= 500 {
            tracing::warn!(status, kind, code, param, reason = %self.message, "refused");
        } else {
            tracing::info!(status, kind, code, param, reason = %self.message, "refused");
        }
    }

    /// An upstream failure the client must see: not failed over (its own request is at
    /// fault), or broken after the first token.
    pub fn from_upstream(backend: &str, e: &UpstreamError) -> Self {
        let reason = format!("backend `{backend}`: {}", e.message);
        let mut error = Self::from_upstream_class(reason, e);
        error.upstream_message = Some(e.message.clone());
        error
    }

    fn from_upstream_class(reason: String, e: &UpstreamError) -> Self {
        match e.class {
            ErrorClass::InvalidRequest => {
                let mut error = Self::new(ErrorCode::UpstreamRejected, reason);
                if let Some(status) = e.status.filter(|s| (400..500).contains(s) && *s != 429) {
                    error.status = status;
                }
                error
            }
            ErrorClass::ContextLength => Self::new(ErrorCode::ContextLengthExceeded, reason),
            ErrorClass::ContentPolicy => Self::new(ErrorCode::ContentPolicyViolation, reason),
            ErrorClass::Auth => Self::new(
                ErrorCode::UpstreamAuth,
                format!("{reason} (the upstream refused Spillway's credentials)"),
            ),
            ErrorClass::Timeout | ErrorClass::Late => Self::new(ErrorCode::Timeout, reason),
            class => Self::new(ErrorCode::Upstream(class), reason),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_statuses_match_the_type() {
        check_table(ErrorCode::all());
    }

    /// Each code's name is used once, and its status fits its type.
    pub(crate) fn check_table(codes: impl IntoIterator<Item = ErrorCode>) {
        let mut seen = std::collections::HashSet::new();
        for code in codes {
            let (status, kind, name) = code.table();
            if let Some(name) = name {
                assert!(seen.insert(name), "{name} is used twice");
            }
            let expected_class = match kind {
                "invalid_request_error" => (400..500).contains(&status),
                "authentication_error" => status == 401,
                "permission_error" => status == 403,
                "billing_error" => status == 402,
                "rate_limit_error" => status == 429,
                "service_unavailable" => status == 503,
                "upstream_error" => status == 502,
                "timeout" => status == 504,
                other => panic!("{code:?}: unknown type {other}"),
            };
            assert!(expected_class, "{code:?}: {status} does not fit type {kind}");
        }
    }

    #[test]
    fn an_upstream_refusal_keeps_its_own_status_under_the_table_type() {
        let e = UpstreamError::new(ErrorClass::InvalidRequest, Some(422), "bad schema");
        let error = ApiError::from_upstream("openai", &e);
        assert_eq!((error.status, error.code.table().1), (422, "invalid_request_error"));
        assert_eq!(error.message, "backend `openai`: bad schema");
        let limited = UpstreamError::new(ErrorClass::ServerError, Some(500), "boom");
        let error = ApiError::from_upstream("vllm", &limited);
        assert_eq!((error.status, error.code.as_str()), (502, Some("server_error")));
    }
}
