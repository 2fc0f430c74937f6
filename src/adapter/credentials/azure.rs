//! Microsoft Entra: access tokens for Azure OpenAI when no `api-key` is configured, read by
//! `azure_identity` from the pod's environment: workload identity (`AZURE_FEDERATED_TOKEN_FILE`
//! with `AZURE_TENANT_ID` and `AZURE_CLIENT_ID`, as the AKS webhook sets them), else a client
//! secret (`AZURE_CLIENT_SECRET`), else the managed identity (`AZURE_CLIENT_ID` naming a
//! user-assigned one). `AZURE_AUTHORITY_HOST` names another cloud's login host. The credential
//! keeps each token until shortly before it expires; its calls go through Spillway's own
//! reqwest client, so they trust what the hosted client trusts.

use std::sync::Arc;

use azure_core::credentials::{Secret, TokenCredential};
use azure_core::http::{
    headers::{HeaderName, HeaderValue, Headers},
    request::Body,
    AsyncRawResponse, ClientOptions, HttpClient, Request, Transport,
};
use azure_identity::{
    ClientAssertionCredentialOptions, ClientSecretCredential, ClientSecretCredentialOptions,
    ManagedIdentityCredential, ManagedIdentityCredentialOptions, UserAssignedId, WorkloadIdentityCredential,
    WorkloadIdentityCredentialOptions,
};
use futures::TryStreamExt;

use crate::canonical::{ErrorClass, UpstreamError};

/// The scope Azure OpenAI is called with.
pub const SCOPE: &str = "https://cognitiveservices.azure.com/.default";

/// The process's Entra credential, made on first use.
pub struct AzureTokens {
    client: reqwest::Client,
    credential: tokio::sync::OnceCell<Arc<dyn TokenCredential>>,
    /// The client secret or federated token, and every token handed out (recent ones).
    pub(in crate::adapter) held: super::held::Held,
}

impl std::fmt::Debug for AzureTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AzureTokens")
    }
}

impl AzureTokens {
    /// Tokens fetched through `client`.
    pub fn new(client: reqwest::Client) -> AzureTokens {
        AzureTokens { client, credential: tokio::sync::OnceCell::new(), held: Default::default() }
    }

    /// A current access token for [`SCOPE`].
    pub(in crate::adapter) async fn token(&self) -> Result<String, UpstreamError> {
        let credential =
            self.credential.get_or_try_init(|| async { self.credential() }).await.map_err(no_token)?;
        let token = credential.get_token(&[SCOPE], None).await.map_err(no_token)?;
        self.held.note(token.token.secret());
        Ok(token.token.secret().to_string())
    }

    /// The credential the environment describes.
    fn credential(&self) -> azure_core::Result<Arc<dyn TokenCredential>> {
        let client_options = ClientOptions {
            transport: Some(Transport::new(Arc::new(Reqwest(self.client.clone())))),
            ..Default::default()
        };
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        // What proves who calls to Entra, in case its endpoint or a proxy echoes it.
        let federated = var("AZURE_FEDERATED_TOKEN_FILE").and_then(|f| std::fs::read_to_string(f).ok());
        for secret in [var("AZURE_CLIENT_SECRET"), federated].into_iter().flatten() {
            self.held.hold(secret.trim());
        }
        if var("AZURE_FEDERATED_TOKEN_FILE").is_some() {
            let credential_options = ClientAssertionCredentialOptions { client_options };
            let options = WorkloadIdentityCredentialOptions { credential_options, ..Default::default() };
            return Ok(WorkloadIdentityCredential::new(Some(options))?);
        }
        if let (Some(tenant), Some(client_id), Some(secret)) =
            (var("AZURE_TENANT_ID"), var("AZURE_CLIENT_ID"), var("AZURE_CLIENT_SECRET"))
        {
            let options = ClientSecretCredentialOptions { client_options };
            return Ok(ClientSecretCredential::new(&tenant, client_id, Secret::new(secret), Some(options))?);
        }
        let user_assigned_id = var("AZURE_CLIENT_ID").map(UserAssignedId::ClientId);
        let options = ManagedIdentityCredentialOptions { user_assigned_id, client_options };
        Ok(ManagedIdentityCredential::new(Some(options))?)
    }
}

fn no_token(e: azure_core::Error) -> UpstreamError {
    UpstreamError::new(ErrorClass::Auth, None, format!("no Microsoft Entra token: {e}"))
}

/// Spillway's reqwest as `azure_core`'s HTTP client.
#[derive(Debug)]
struct Reqwest(reqwest::Client);

#[async_trait::async_trait]
impl HttpClient for Reqwest {
    async fn execute_request(&self, request: &Request) -> azure_core::Result<AsyncRawResponse> {
        let method = reqwest::Method::from_bytes(request.method().as_ref().as_bytes()).map_err(|e| {
            azure_core::Error::with_error(azure_core::error::ErrorKind::Other, e, "HTTP method")
        })?;
        let mut builder = self.0.request(method, request.url().as_str());
        for (name, value) in request.headers().iter() {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let builder = match request.body() {
            Body::Bytes(bytes) => builder.body(bytes.clone()),
            #[allow(unreachable_patterns)]
            _ => {
                return Err(azure_core::Error::with_message(
                    azure_core::error::ErrorKind::Other,
                    "a streamed request body is not sent to the token endpoint",
                ))
            }
        };
        let response = builder.send().await.map_err(|e| {
            let kind = if e.is_connect() {
                azure_core::error::ErrorKind::Connection
            } else {
                azure_core::error::ErrorKind::Io
            };
            azure_core::Error::with_error(kind, UpstreamError::from_reqwest(&e).message, "token request")
        })?;
        let status = response.status().as_u16();
        let headers: Headers = response
            .headers()
            .iter()
            .filter_map(|(name, value)| {
                let value = value.to_str().ok()?;
                Some((HeaderName::from(name.as_str().to_owned()), HeaderValue::from(value.to_owned())))
            })
            .collect::<std::collections::HashMap<_, _>>()
            .into();
        let body = response.bytes_stream().map_err(|e| {
            azure_core::Error::with_error(
                azure_core::error::ErrorKind::Io,
                UpstreamError::from_reqwest(&e).message,
                "token body",
            )
        });
        Ok(AsyncRawResponse::new(status.into(), headers, Box::pin(body)))
    }
}
