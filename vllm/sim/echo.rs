//! `--echo-credentials`: an upstream that quotes back the credentials a request carried, as a
//! provider refusing a key, a gateway in front of one or AWS explaining a signature mismatch
//! does. Every error the sim then writes (a fault's whole error, an in-stream error event, a
//! Bedrock stream exception) ends with the quote: each credential header whole and cut to its
//! first [`PREFIX`] characters, and the secrets the sim holds to check them (the AWS secret key,
//! a line of the service account's key, the Entra client secret), so that a test can look for
//! every one of them wherever the router's texts go.
//!
//! It only adds words to errors that were going to be written anyway: what is checked, refused
//! and answered stays as it was.

use axum::http::HeaderMap;

/// The headers that carry who calls, in every provider's wire.
pub const CREDENTIAL_HEADERS: [&str; 5] =
    ["authorization", "x-api-key", "api-key", "x-goog-api-key", "x-amz-security-token"];

/// How much of a credential a truncated echo keeps.
pub const PREFIX: usize = 16;

/// `--echo-credentials`: the secrets the sim holds to check credentials, quoted beside those a
/// request carried.
#[derive(Debug, Default)]
pub struct Echo {
    held: Vec<String>,
}

impl Echo {
    /// An echo of `held` (empty values left out) and of each request's credentials.
    pub fn new(held: impl IntoIterator<Item = String>) -> Echo {
        Echo { held: held.into_iter().filter(|s| !s.is_empty()).collect() }
    }

    /// The quote for a request with `headers`, when there is anything to quote.
    pub fn of(&self, headers: &HeaderMap) -> Option<String> {
        let held: Vec<&str> = self.held.iter().map(String::as_str).collect();
        quote(headers, &held)
    }
}

/// `what`, then `echo` when there is one.
pub fn with(what: String, echo: Option<&str>) -> String {
    match echo {
        Some(echo) => format!("{what} {echo}"),
        None => what,
    }
}

/// The credentials in `headers` and the `held` secrets, each whole and cut to [`PREFIX`]
/// characters; `None` when there are none.
pub fn quote(headers: &HeaderMap, held: &[&str]) -> Option<String> {
    let mut parts = Vec::new();
    for name in CREDENTIAL_HEADERS {
        let Some(value) = headers.get(name).and_then(|v| v.to_str().ok()) else { continue };
        let bare = value.strip_prefix("Bearer ").unwrap_or(value);
        parts.push(format!("{name}: {value} (it begins {}…)", prefix(bare)));
    }
    for secret in held.iter().filter(|s| !s.is_empty()) {
        parts.push(format!("held: {secret} (it begins {}…)", prefix(secret)));
    }
    (!parts.is_empty()).then(|| format!("[echoed credentials: {}]", parts.join("; ")))
}

/// The first [`PREFIX`] characters of `value`.
fn prefix(value: &str) -> &str {
    value.char_indices().nth(PREFIX).map_or(value, |(at, _)| &value[..at])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_credential_header_and_held_secret_is_quoted_whole_and_cut() {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", "Bearer tok-0123456789abcdefghij".parse().unwrap());
        headers.insert("x-amz-security-token", "IQoJsession0123456789".parse().unwrap());
        headers.insert("content-type", "application/json".parse().unwrap());
        let quoted = quote(&headers, &["held-secret-0123456789", ""]).unwrap();
        assert_eq!(
            quoted,
            "[echoed credentials: authorization: Bearer tok-0123456789abcdefghij (it begins tok-0123456789ab…); \
             x-amz-security-token: IQoJsession0123456789 (it begins IQoJsession01234…); \
             held: held-secret-0123456789 (it begins held-secret-0123…)]"
        );
        assert_eq!(quote(&HeaderMap::new(), &[]), None, "nothing to quote");
        assert_eq!(with("broke".into(), Some("[q]")), "broke [q]");
        assert_eq!(with("broke".into(), None), "broke");
    }
}
