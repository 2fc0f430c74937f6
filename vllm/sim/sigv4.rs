//! The simulator's own check of an AWS Signature Version 4, written from AWS's published
//! algorithm (not with the signing crate the router uses, so that a mistake in one is caught
//! by the other): the canonical request (each path segment URI-encoded once more, as every
//! service but S3 does), the string to sign, the key derived from the secret, date, region and
//! service, and the signed headers, which must cover `host`, `x-amz-date` and, with temporary
//! credentials, `x-amz-security-token`.

use std::time::{Duration, SystemTime};

use axum::http::{HeaderMap, Method, Uri};
use ring::{digest, hmac};

/// A signature older or newer than this is refused, as AWS does.
const SKEW: Duration = Duration::from_secs(5 * 60);

/// Whom the sim accepts signatures from, and where it serves.
#[derive(Debug, Clone)]
pub struct AwsIdentity {
    pub access_key_id: String,
    pub secret: String,
    pub session_token: Option<String>,
    pub region: String,
    pub service: &'static str,
}

impl AwsIdentity {
    pub fn from_args(args: &super::SimArgs) -> Option<AwsIdentity> {
        Some(AwsIdentity {
            access_key_id: args.aws_access_key_id.clone()?,
            secret: args.aws_secret_access_key.clone()?,
            session_token: args.aws_session_token.clone(),
            region: args.aws_region.clone(),
            service: "bedrock",
        })
    }
}

/// A refusal: its status, the exception name AWS gives it, and its words.
#[derive(Debug)]
pub struct Refused {
    pub status: u16,
    pub exception: &'static str,
    pub message: String,
}

fn refused(exception: &'static str, status: u16, message: impl Into<String>) -> Refused {
    Refused { status, exception, message: message.into() }
}

/// Check the request's `Authorization` header against `who` at `now`.
pub fn verify(
    who: &AwsIdentity,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
    now: SystemTime,
) -> Result<(), Refused> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let Some(auth) = header("authorization") else {
        return Err(refused("MissingAuthenticationTokenException", 403, "Missing Authentication Token"));
    };
    let Some(fields) = auth.strip_prefix("AWS4-HMAC-SHA256 ") else {
        return Err(refused(
            "IncompleteSignatureException",
            403,
            "Authorization header requires AWS4-HMAC-SHA256",
        ));
    };
    let field = |name: &str| {
        fields.split(',').map(str::trim).find_map(|f| f.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
    };
    let (Some(credential), Some(signed), Some(signature)) =
        (field("Credential"), field("SignedHeaders"), field("Signature"))
    else {
        return Err(refused(
            "IncompleteSignatureException",
            403,
            "Authorization header requires Credential, SignedHeaders and Signature",
        ));
    };
    let scope: Vec<&str> = credential.splitn(5, '/').collect();
    let [key_id, day, region, service, "aws4_request"] = scope[..] else {
        return Err(refused(
            "IncompleteSignatureException",
            403,
            format!("malformed Credential: {credential}"),
        ));
    };
    if key_id != who.access_key_id {
        return Err(refused(
            "UnrecognizedClientException",
            403,
            "The security token included in the request is invalid.",
        ));
    }
    if region != who.region || service != who.service {
        return Err(refused(
            "InvalidSignatureException",
            403,
            format!(
                "Credential should be scoped to a valid region and service: {region}/{service} is not {}/{}",
                who.region, who.service
            ),
        ));
    }
    let signed: Vec<&str> = signed.split(';').collect();
    let mut required = vec!["host", "x-amz-date"];
    if let Some(token) = &who.session_token {
        if header("x-amz-security-token") != Some(token.as_str()) {
            return Err(refused(
                "UnrecognizedClientException",
                403,
                "The security token included in the request is invalid.",
            ));
        }
        required.push("x-amz-security-token");
    }
    if let Some(missing) = required.iter().find(|h| !signed.contains(h)) {
        return Err(refused(
            "InvalidSignatureException",
            403,
            format!("'{missing}' must be a signed header"),
        ));
    }
    let amz_date = header("x-amz-date").unwrap_or_default();
    match parse_amz_date(amz_date) {
        Some(at) if at.duration_since(now).or(now.duration_since(at)).unwrap_or_default() <= SKEW => {}
        _ => {
            return Err(refused(
                "InvalidSignatureException",
                403,
                format!("Signature expired or not yet current: {amz_date}"),
            ))
        }
    }
    if !amz_date.starts_with(day) {
        return Err(refused("InvalidSignatureException", 403, "The credential's date is not the request's"));
    }
    let canonical = canonical_request(method, uri, headers, &signed, body);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{day}/{region}/{service}/aws4_request\n{}",
        hex::encode(digest::digest(&digest::SHA256, canonical.as_bytes()))
    );
    let mut key = format!("AWS4{}", who.secret).into_bytes();
    for part in [day, region, service, "aws4_request"] {
        key = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &key), part.as_bytes()).as_ref().to_vec();
    }
    let expected = hex::encode(hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &key), to_sign.as_bytes()));
    if expected != signature {
        // AWS says what it signed: the canonical request, session token and all.
        return Err(refused(
            "InvalidSignatureException",
            403,
            format!("The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.\n\nThe Canonical String for this request should have been\n'{canonical}'\n\nThe String-to-Sign should have been\n'{to_sign}'\n"),
        ));
    }
    Ok(())
}

/// The canonical request: method, URI (each segment of the path as sent, encoded again),
/// query, the signed headers' names and trimmed values, their list, and the body's hash.
fn canonical_request(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    signed: &[&str],
    body: &[u8],
) -> String {
    let path: Vec<String> = uri.path().split('/').map(encode).collect();
    let mut query: Vec<(String, String)> = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (encode(k), encode(v))
        })
        .collect();
    query.sort();
    let query: Vec<String> = query.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut lines = format!("{method}\n{}\n{}\n", path.join("/"), query.join("&"));
    for name in signed {
        let values: Vec<String> = headers
            .get_all(*name)
            .iter()
            .map(|v| v.to_str().unwrap_or_default().split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        lines.push_str(&format!("{name}:{}\n", values.join(",")));
    }
    let hash = hex::encode(digest::digest(&digest::SHA256, body));
    format!("{lines}\n{}\n{hash}", signed.join(";"))
}

/// RFC 3986 encoding of everything but the unreserved characters.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `20251206T054640Z` as a time.
fn parse_amz_date(text: &str) -> Option<SystemTime> {
    let civil = jiff::civil::DateTime::strptime("%Y%m%dT%H%M%SZ", text).ok()?;
    let stamp = civil.to_zoned(jiff::tz::TimeZone::UTC).ok()?.timestamp();
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(stamp.as_second()).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's published example (`get-vanilla` of the SigV4 test suite).
    #[test]
    fn the_published_example_verifies() {
        let who = AwsIdentity {
            access_key_id: "AKIDEXAMPLE".into(),
            secret: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
            region: "us-east-1".into(),
            service: "service",
        };
        let mut headers = HeaderMap::new();
        headers.insert("host", "example.amazonaws.com".parse().unwrap());
        headers.insert("x-amz-date", "20150830T123600Z".parse().unwrap());
        headers.insert(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
                .parse()
                .unwrap(),
        );
        let at = parse_amz_date("20150830T123600Z").unwrap();
        let uri: Uri = "/".parse().unwrap();
        verify(&who, &Method::GET, &uri, &headers, b"", at).unwrap();
        let later = at + Duration::from_secs(301);
        assert_eq!(
            verify(&who, &Method::GET, &uri, &headers, b"", later).unwrap_err().exception,
            "InvalidSignatureException"
        );
        let wrong = AwsIdentity { secret: "other".into(), ..who.clone() };
        assert!(verify(&wrong, &Method::GET, &uri, &headers, b"", at)
            .unwrap_err()
            .message
            .contains("does not match"));
        let elsewhere = AwsIdentity { region: "eu-west-1".into(), ..who };
        assert!(verify(&elsewhere, &Method::GET, &uri, &headers, b"", at)
            .unwrap_err()
            .message
            .contains("scoped"));
    }

    #[test]
    fn a_path_segment_is_encoded_once_more() {
        let uri: Uri = "/model/us.anthropic.claude%3A0/invoke".parse().unwrap();
        let canonical = canonical_request(&Method::POST, &uri, &HeaderMap::new(), &[], b"");
        assert!(canonical.starts_with("POST\n/model/us.anthropic.claude%253A0/invoke\n"), "{canonical}");
    }
}
