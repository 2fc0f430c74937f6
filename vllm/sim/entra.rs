//! Microsoft Entra's token endpoint as the Azure OpenAI simulator serves it
//! (`POST /{tenant}/oauth2/v2.0/token`, the client-credentials grant): an application proves
//! itself with its client secret or with a federated token (workload identity's client
//! assertion), asks for the Cognitive Services scope, and gets an access token the simulator
//! then accepts as a bearer token beside the `api-key`. `azure.rs` serves it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use axum::http::StatusCode;

const ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
const SCOPE: &str = "https://cognitiveservices.azure.com/.default";

/// The application the endpoint knows, and the tokens it issued.
#[derive(Debug, Default)]
pub struct EntraApp {
    pub tenant: String,
    pub client_id: String,
    pub client_secret: Option<String>,
    /// The federated token a workload identity presents as its client assertion.
    pub federated_token: Option<String>,
    issued: Mutex<HashSet<String>>,
    pub grants: AtomicU64,
}

impl EntraApp {
    pub fn from_args(args: &super::SimArgs) -> Option<EntraApp> {
        Some(EntraApp {
            tenant: args.entra_tenant_id.clone()?,
            client_id: args.entra_client_id.clone()?,
            client_secret: args.entra_client_secret.clone(),
            federated_token: args.entra_federated_token.clone(),
            ..Default::default()
        })
    }

    /// Whether `token` is one this endpoint issued.
    pub fn accepts(&self, token: &str) -> bool {
        self.issued.lock().expect("issued tokens").contains(token)
    }

    /// Every token this endpoint issued.
    pub fn issued(&self) -> Vec<String> {
        self.issued.lock().expect("issued tokens").iter().cloned().collect()
    }

    /// A token for the client-credentials request `form` to `tenant`, or the refusal: its
    /// status, OAuth error and description.
    pub fn grant(
        &self,
        tenant: &str,
        form: &[(String, String)],
    ) -> Result<String, (StatusCode, &'static str, String)> {
        let get = |name: &str| form.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        let refuse = |status, error, why: &str| Err((status, error, why.to_string()));
        if tenant != self.tenant {
            return refuse(StatusCode::BAD_REQUEST, "invalid_tenant", "AADSTS90002: Tenant not found.");
        }
        if get("grant_type") != Some("client_credentials")
            || get("client_id") != Some(self.client_id.as_str())
        {
            return refuse(
                StatusCode::BAD_REQUEST,
                "unauthorized_client",
                "AADSTS700016: Application not found in the directory.",
            );
        }
        if get("scope") != Some(SCOPE) {
            return refuse(
                StatusCode::BAD_REQUEST,
                "invalid_scope",
                "AADSTS70011: The provided value for the input parameter 'scope' is not valid.",
            );
        }
        let by_secret = self.client_secret.is_some() && get("client_secret") == self.client_secret.as_deref();
        let by_assertion = self.federated_token.is_some()
            && get("client_assertion_type") == Some(ASSERTION_TYPE)
            && get("client_assertion") == self.federated_token.as_deref();
        if !(by_secret || by_assertion) {
            return refuse(
                StatusCode::UNAUTHORIZED,
                "invalid_client",
                "AADSTS7000215: Invalid client secret or assertion provided.",
            );
        }
        let n = self.grants.fetch_add(1, Ordering::Relaxed) + 1;
        let token = format!("eyJ0eXAiOiJKV1QiLCJzaW0iOjF9.entra-sim-{n:08x}-{:016x}", rand::random::<u64>());
        self.issued.lock().expect("issued tokens").insert(token.clone());
        Ok(token)
    }
}
