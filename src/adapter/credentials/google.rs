//! Google: OAuth access tokens from Application Default Credentials, read by `gcp_auth`: a
//! service-account file in `GOOGLE_APPLICATION_CREDENTIALS` (its JWT exchanged at the file's
//! own `token_uri`), an authorized-user file, gcloud's login, or the metadata server (GKE
//! workload identity, Compute Engine); or from one backend's own service-account file. The
//! provider keeps each token until shortly before it expires and fetches one at a time.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gcp_auth::TokenProvider;

use crate::canonical::{ErrorClass, UpstreamError};

/// The scope Vertex AI is called with.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// Google credentials: the process's default ones, or one service-account file's; found on
/// first use, kept for the process's life.
#[derive(Default)]
pub struct GoogleTokens {
    /// `None`: Application Default Credentials.
    file: Option<PathBuf>,
    provider: tokio::sync::OnceCell<Arc<dyn TokenProvider>>,
    /// The key file's secrets and every token handed out (recent ones).
    pub(in crate::adapter) held: super::held::Held,
}

impl std::fmt::Debug for GoogleTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GoogleTokens")
    }
}

impl GoogleTokens {
    /// A current access token for [`SCOPE`].
    pub(in crate::adapter) async fn token(&self) -> Result<String, UpstreamError> {
        let provider = self
            .provider
            .get_or_try_init(|| async {
                if let Some(file) = self.file.clone().or_else(default_file) {
                    self.held.hold_file(&file);
                }
                match &self.file {
                    None => gcp_auth::provider().await,
                    Some(file) => {
                        let account = gcp_auth::CustomServiceAccount::from_file(file)?;
                        Ok(Arc::new(account) as Arc<dyn TokenProvider>)
                    }
                }
            })
            .await
            .map_err(no_token)?;
        let token = provider.token(&[SCOPE]).await.map_err(no_token)?;
        self.held.note(token.as_str());
        Ok(token.as_str().to_string())
    }
}

/// The file Application Default Credentials read, when it is one: `GOOGLE_APPLICATION_CREDENTIALS`,
/// else gcloud's own (`~/.config/gcloud/application_default_credentials.json`).
fn default_file() -> Option<PathBuf> {
    let named = std::env::var_os("GOOGLE_APPLICATION_CREDENTIALS").filter(|v| !v.is_empty());
    let gcloud = || {
        let home = std::env::var_os("HOME")?;
        Some(Path::new(&home).join(".config/gcloud/application_default_credentials.json"))
    };
    named.map(PathBuf::from).or_else(gcloud)
}

fn no_token(e: gcp_auth::Error) -> UpstreamError {
    UpstreamError::new(ErrorClass::Auth, None, format!("no Google access token: {e}"))
}

/// The default credentials and those of each service-account file a backend names.
#[derive(Debug, Default)]
pub struct GoogleCredentials {
    default: Arc<GoogleTokens>,
    files: Mutex<HashMap<PathBuf, Arc<GoogleTokens>>>,
}

impl GoogleCredentials {
    /// The tokens of `file`, or the default ones.
    pub fn tokens(&self, file: Option<&Path>) -> Arc<GoogleTokens> {
        let Some(file) = file else { return Arc::clone(&self.default) };
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        let tokens = files.entry(file.to_path_buf()).or_insert_with(|| {
            Arc::new(GoogleTokens { file: Some(file.to_path_buf()), ..Default::default() })
        });
        Arc::clone(tokens)
    }
}
