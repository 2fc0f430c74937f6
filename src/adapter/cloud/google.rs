//! Google: OAuth access tokens from Application Default Credentials, read by `gcp_auth`: a
//! service-account file in `GOOGLE_APPLICATION_CREDENTIALS` (its JWT exchanged at the file's
//! own `token_uri`), an authorized-user file, gcloud's login, or the metadata server (GKE
//! workload identity, Compute Engine). The provider keeps each token until shortly before it
//! expires and fetches one at a time.

use std::sync::Arc;

use gcp_auth::TokenProvider;

use crate::canonical::{ErrorClass, UpstreamError};

/// The scope Vertex AI is called with.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// The process's Google credentials: found on first use, kept for the process's life.
#[derive(Default)]
pub struct GoogleTokens {
    provider: tokio::sync::OnceCell<Arc<dyn TokenProvider>>,
}

impl std::fmt::Debug for GoogleTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GoogleTokens")
    }
}

impl GoogleTokens {
    /// A current access token for [`SCOPE`].
    pub async fn token(&self) -> Result<String, UpstreamError> {
        let provider = self.provider.get_or_try_init(gcp_auth::provider).await.map_err(no_token)?;
        let token = provider.token(&[SCOPE]).await.map_err(no_token)?;
        Ok(token.as_str().to_string())
    }
}

fn no_token(e: gcp_auth::Error) -> UpstreamError {
    UpstreamError::new(ErrorClass::Auth, None, format!("no Google access token: {e}"))
}
