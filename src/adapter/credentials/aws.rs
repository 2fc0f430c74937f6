//! AWS: credentials from the standard chain (environment keys with a session token, web
//! identity / IRSA, EKS Pod Identity and ECS container credentials, IMDSv2, profiles), read by
//! `aws-config` and kept until shortly before they expire, and SigV4 signatures made by
//! `aws-sigv4` for the backend's own region.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use aws_config::default_provider::credentials::DefaultCredentialsChain;
use aws_config::provider_config::ProviderConfig;
use aws_credential_types::provider::ProvideCredentials;
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use http::HeaderName;

use crate::canonical::{ErrorClass, UpstreamError};

/// Credentials are fetched again this long before they expire.
const REFRESH_AHEAD: Duration = Duration::from_secs(5 * 60);

/// The process's AWS credentials: the chain, built on first use, and the last credentials it
/// gave. One refresh runs at a time; the others wait for it.
#[derive(Default)]
pub struct AwsCredentials {
    chain: tokio::sync::OnceCell<DefaultCredentialsChain>,
    cached: Mutex<Option<Credentials>>,
    refreshing: tokio::sync::Mutex<()>,
    /// Every key id, secret key and session token fetched (recent ones), and the tokens that
    /// fetch them (web identity, container credentials).
    pub(in crate::adapter) held: super::held::Held,
}

impl std::fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AwsCredentials")
    }
}

impl AwsCredentials {
    /// Credentials good for at least a while yet: the cached ones, else fresh from the chain.
    pub(in crate::adapter) async fn get(&self) -> Result<Credentials, UpstreamError> {
        if let Some(fresh) = self.cached_fresh() {
            return Ok(fresh);
        }
        let _one = self.refreshing.lock().await;
        if let Some(fresh) = self.cached_fresh() {
            return Ok(fresh);
        }
        // What proves who calls to STS or the container endpoint, in case one echoes it.
        for file in ["AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"] {
            let token = std::env::var_os(file).and_then(|f| std::fs::read_to_string(f).ok());
            self.held.note(token.as_deref().unwrap_or_default().trim());
        }
        let chain = self.chain.get_or_init(build_chain).await;
        let credentials = chain.provide_credentials().await.map_err(|e| {
            UpstreamError::new(ErrorClass::Auth, None, format!("no AWS credentials from the chain: {e}"))
        })?;
        tracing::debug!(expiry = ?credentials.expiry(), "AWS credentials fetched");
        let session = credentials.session_token().unwrap_or_default();
        for value in [credentials.access_key_id(), credentials.secret_access_key(), session] {
            self.held.note(value);
        }
        *self.cached.lock().unwrap_or_else(|e| e.into_inner()) = Some(credentials.clone());
        Ok(credentials)
    }

    fn cached_fresh(&self) -> Option<Credentials> {
        let cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        cached.as_ref().filter(|c| still_fresh(c.expiry(), SystemTime::now())).cloned()
    }
}

/// Whether credentials that expire at `expiry` (never, if `None`) are good past `now` plus
/// [`REFRESH_AHEAD`].
fn still_fresh(expiry: Option<SystemTime>, now: SystemTime) -> bool {
    expiry.is_none_or(|at| at > now + REFRESH_AHEAD)
}

/// The default chain, with its HTTP calls (STS, IMDS, container endpoints) made over rustls
/// with ring, as Spillway's other TLS.
async fn build_chain() -> DefaultCredentialsChain {
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
    let http =
        aws_smithy_http_client::Builder::new().tls_provider(Provider::Rustls(CryptoMode::Ring)).build_https();
    let config = ProviderConfig::without_region().with_http_client(http);
    DefaultCredentialsChain::builder().configure(config).build().await
}

/// The headers that sign `POST url` with `body` for `service` in `region` (`authorization`,
/// `x-amz-date`, and `x-amz-security-token` with temporary credentials). `headers` are the
/// request's other headers, which the signature covers.
pub(in crate::adapter) fn sign_post(
    credentials: &Credentials,
    region: &str,
    service: &str,
    url: &str,
    headers: &[(HeaderName, String)],
    body: &[u8],
    now: SystemTime,
) -> Result<Vec<(HeaderName, String)>, UpstreamError> {
    let failed = |e: &dyn std::fmt::Display| {
        UpstreamError::new(ErrorClass::InvalidRequest, None, format!("could not sign the request: {e}"))
    };
    let identity = credentials.clone().into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(now)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| failed(&e))?
        .into();
    let signable = SignableRequest::new(
        "POST",
        url,
        headers.iter().map(|(name, value)| (name.as_str(), value.as_str())),
        SignableBody::Bytes(body),
    )
    .map_err(|e| failed(&e))?;
    let (instructions, _signature) = sign(signable, &params).map_err(|e| failed(&e))?.into_parts();
    let (signed, _query) = instructions.into_parts();
    signed
        .into_iter()
        .map(|header| {
            let name = HeaderName::from_bytes(header.name().as_bytes()).map_err(|e| failed(&e))?;
            Ok((name, header.value().to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_refreshed_five_minutes_before_they_expire() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert!(still_fresh(None, now), "long-term keys never expire");
        assert!(still_fresh(Some(now + Duration::from_secs(301)), now));
        assert!(!still_fresh(Some(now + Duration::from_secs(299)), now));
        assert!(!still_fresh(Some(now - Duration::from_secs(1)), now));
    }

    #[test]
    fn a_signature_names_its_day_region_and_service_and_covers_the_session_token() {
        let credentials = Credentials::new("AKIDEXAMPLE", "secret", Some("session".into()), None, "test");
        let url = "https://bedrock-runtime.eu-west-1.amazonaws.com/model/us.anthropic.claude%3A0/invoke";
        let headers = [(http::header::CONTENT_TYPE, "application/json".to_string())];
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_765_000_000);
        let signed = sign_post(&credentials, "eu-west-1", "bedrock", url, &headers, b"{}", at).unwrap();
        let get = |name: &str| signed.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        let authorization = get("authorization").unwrap();
        assert!(
            authorization.starts_with(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20251206/eu-west-1/bedrock/aws4_request"
            ),
            "{authorization}"
        );
        assert!(authorization.contains("x-amz-security-token"), "the token is signed: {authorization}");
        assert_eq!(get("x-amz-security-token").as_deref(), Some("session"));
        assert_eq!(get("x-amz-date").as_deref(), Some("20251206T054640Z"));
    }
}
