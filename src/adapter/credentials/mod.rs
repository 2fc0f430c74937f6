//! How a cloud upstream learns who is calling when no API key is configured: AWS SigV4 with
//! credentials from the AWS chain (Bedrock), a Google OAuth token (Vertex AI). Each is made
//! per request from credentials the process fetches once and keeps until shortly before they
//! expire. Each source also keeps what it handed out ([`held`]) for the redactor of a call.

pub mod aws;
pub mod azure;
pub mod google;
pub mod held;

use std::sync::Arc;
use std::time::SystemTime;

use http::HeaderName;

use crate::canonical::UpstreamError;

/// The credentials of the clouds, shared by every backend that needs them.
#[derive(Debug)]
pub struct CloudCredentials {
    pub aws: Arc<aws::AwsCredentials>,
    pub google: google::GoogleCredentials,
    pub azure: Arc<azure::AzureTokens>,
}

impl CloudCredentials {
    /// Credentials whose HTTP calls (where the crate lets them be Spillway's) go through
    /// `client`.
    pub fn new(client: reqwest::Client) -> CloudCredentials {
        CloudCredentials {
            aws: Default::default(),
            google: Default::default(),
            azure: Arc::new(azure::AzureTokens::new(client)),
        }
    }
}

/// How one call proves who is calling.
#[derive(Debug, Clone)]
pub enum CloudAuth {
    /// SigV4 for `service` in `region` (never the process's `AWS_REGION`).
    Aws { region: String, service: &'static str, credentials: Arc<aws::AwsCredentials> },
    /// A Google OAuth token as a bearer token.
    Google(Arc<google::GoogleTokens>),
    /// A Microsoft Entra token as a bearer token.
    Azure(Arc<azure::AzureTokens>),
}

impl PartialEq for CloudAuth {
    fn eq(&self, other: &CloudAuth) -> bool {
        match (self, other) {
            (
                CloudAuth::Aws { region, service, credentials },
                CloudAuth::Aws { region: r, service: s, credentials: c },
            ) => region == r && service == s && Arc::ptr_eq(credentials, c),
            (CloudAuth::Google(a), CloudAuth::Google(b)) => Arc::ptr_eq(a, b),
            (CloudAuth::Azure(a), CloudAuth::Azure(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl CloudAuth {
    /// Every secret these credentials hold or handed out, for a call's redactor.
    pub(in crate::adapter) fn secrets(&self) -> Vec<String> {
        match self {
            CloudAuth::Aws { credentials, .. } => credentials.held.values(),
            CloudAuth::Google(tokens) => tokens.held.values(),
            CloudAuth::Azure(tokens) => tokens.held.values(),
        }
    }

    /// The headers that authenticate `POST url` with `headers` and `body`.
    pub(in crate::adapter) async fn headers(
        &self,
        url: &str,
        headers: &[(HeaderName, String)],
        body: &[u8],
    ) -> Result<Vec<(HeaderName, String)>, UpstreamError> {
        match self {
            CloudAuth::Aws { region, service, credentials } => {
                let credentials = credentials.get().await?;
                aws::sign_post(&credentials, region, service, url, headers, body, SystemTime::now())
            }
            CloudAuth::Google(tokens) => {
                Ok(vec![(http::header::AUTHORIZATION, format!("Bearer {}", tokens.token().await?))])
            }
            CloudAuth::Azure(tokens) => {
                Ok(vec![(http::header::AUTHORIZATION, format!("Bearer {}", tokens.token().await?))])
            }
        }
    }
}
