//! The OAuth token endpoint a Google service-account file points to (its `token_uri`), as the
//! Vertex simulator serves it at `/token`: the JWT-bearer grant (RFC 7523). The assertion must
//! be an RS256 JWT signed with the service account's key (checked with its public half), issued
//! by the account's `client_email`, for this endpoint (`aud`), asking for the cloud-platform
//! scope, and current; the answer is an access token the simulator then accepts as a bearer.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use base64::Engine;
use ring::signature::{RsaKeyPair, UnparsedPublicKey, RSA_PKCS1_2048_8192_SHA256};
use serde_json::{json, Value};

/// The JWT-bearer grant type.
const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// The scope Vertex AI needs.
const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// A service account the endpoint knows, and the tokens it has issued.
#[derive(Debug)]
pub struct GoogleAccount {
    pub client_email: String,
    /// The RSA public key (PKCS#1 DER) of the account's private key.
    public_key: Vec<u8>,
    /// The first line of the account's key (base64 of its PKCS#8), for `--echo-credentials`.
    pub key_line: String,
    issued: Mutex<HashSet<String>>,
    /// Tokens granted so far.
    pub grants: AtomicU64,
}

impl GoogleAccount {
    /// The account of a service-account JSON file (`client_email`, `private_key`).
    pub fn from_file(path: &std::path::Path) -> Result<GoogleAccount, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let file: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let field = |name: &str| {
            file.get(name).and_then(Value::as_str).ok_or_else(|| format!("{}: no {name}", path.display()))
        };
        let key = field("private_key")?;
        let key_line = key.lines().find(|l| !l.starts_with("-----")).unwrap_or_default().to_string();
        let pem = pem::parse(key).map_err(|e| format!("private_key: {e}"))?;
        let pair = RsaKeyPair::from_pkcs8(pem.contents()).map_err(|e| format!("private_key: {e}"))?;
        Ok(GoogleAccount {
            client_email: field("client_email")?.to_string(),
            public_key: ring::signature::KeyPair::public_key(&pair).as_ref().to_vec(),
            key_line,
            issued: Mutex::new(HashSet::new()),
            grants: AtomicU64::new(0),
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

    /// Answer a token request (its form's `fields`) made to `audience` (this endpoint's URL) at
    /// `now` (Unix seconds): the token JSON, or the OAuth error JSON.
    pub fn grant(&self, fields: &[(String, String)], audience: &str, now: i64) -> Result<Value, Value> {
        let refused = |error: &str, why: String| json!({"error": error, "error_description": why});
        let get = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        if get("grant_type") != Some(GRANT_TYPE) {
            return Err(refused("unsupported_grant_type", format!("grant_type must be {GRANT_TYPE}")));
        }
        let assertion = get("assertion").unwrap_or_default();
        let claims = self.verify(assertion).map_err(|why| refused("invalid_grant", why))?;
        let claim = |name: &str| claims.get(name).and_then(Value::as_str).unwrap_or_default();
        let (iat, exp) = (claims["iat"].as_i64().unwrap_or(0), claims["exp"].as_i64().unwrap_or(0));
        let why = if claim("iss") != self.client_email {
            Some(format!("Invalid JWT: iss {} is not the account", claim("iss")))
        } else if claim("aud") != audience {
            Some(format!("Invalid JWT: aud {} is not {audience}", claim("aud")))
        } else if !claim("scope").split(' ').any(|s| s == SCOPE) {
            Some(format!("Invalid JWT: scope does not include {SCOPE}"))
        } else if exp <= now || iat > now + 300 || exp - iat > 3600 {
            Some(
                "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe."
                    .into(),
            )
        } else {
            None
        };
        if let Some(why) = why {
            return Err(refused("invalid_grant", why));
        }
        let n = self.grants.fetch_add(1, Ordering::Relaxed) + 1;
        let token = format!("ya29.sim-{n:08x}-{:016x}", rand::random::<u64>());
        self.issued.lock().expect("issued tokens").insert(token.clone());
        Ok(json!({"access_token": token, "expires_in": 3599, "token_type": "Bearer"}))
    }

    /// The claims of `jwt` once its RS256 signature checks out.
    fn verify(&self, jwt: &str) -> Result<Value, String> {
        let parts: Vec<&str> = jwt.split('.').collect();
        let [head, body, signature] = parts[..] else { return Err("Invalid JWT: not three parts".into()) };
        let decode = |part: &str| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(part.trim_end_matches('='))
                .map_err(|e| format!("Invalid JWT: {e}"))
        };
        let header: Value =
            serde_json::from_slice(&decode(head)?).map_err(|e| format!("Invalid JWT: {e}"))?;
        if header["alg"] != "RS256" {
            return Err(format!("Invalid JWT: alg {} is not RS256", header["alg"]));
        }
        UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, &self.public_key)
            .verify(format!("{head}.{body}").as_bytes(), &decode(signature)?)
            .map_err(|_| "Invalid JWT Signature.".to_string())?;
        serde_json::from_slice(&decode(body)?).map_err(|e| format!("Invalid JWT: {e}"))
    }
}
