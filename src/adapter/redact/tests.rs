use super::*;
use crate::adapter::credentials::CloudAuth;
use crate::adapter::{Call, Upstream, WireFormat};
use crate::canonical::{ChatRequest, ErrorClass, Event};
use std::time::Duration;

const PROVIDER: &str = "prov-0123456789abcdef";
const CLIENT: &str = "ck-PLANTED-client-key-4242";

fn redactor() -> Redactor {
    Redactor::new([PROVIDER, CLIENT, "", "short", "  "])
}

#[test]
fn every_occurrence_of_each_secret_is_replaced() {
    let text = format!("Incorrect API key provided: {PROVIDER}. Seen {PROVIDER} and {CLIENT} twice");
    let clean = redactor().scrub(&text).into_owned();
    assert_eq!(clean, "Incorrect API key provided: [redacted]. Seen [redacted] and [redacted] twice");
}

#[test]
fn short_and_empty_secrets_are_not_matched() {
    let r = redactor();
    assert_eq!(r.len(), 2, "only the two long secrets are kept");
    let text = "a short message with no secret in it";
    assert!(matches!(r.scrub(text), Cow::Borrowed(_)), "nothing to replace: borrowed");
    assert_eq!(r.scrub(text), text);
    assert!(Redactor::new(["1234567"]).is_empty());
    assert_eq!(Redactor::new(["12345678"]).len(), 1);
    assert_eq!(Redactor::new(["12345678"]).scrub("a 1234567 b 12345678"), "a 1234567 b [redacted]");
}

#[test]
fn a_secret_containing_another_is_replaced_whole() {
    let r = Redactor::new(["abcdefgh", "abcdefgh-longer-one"]);
    assert_eq!(r.scrub("x abcdefgh-longer-one y abcdefgh"), "x [redacted] y [redacted]");
}

#[test]
fn an_echo_cut_short_or_starting_late_is_cut_from_twelve_characters() {
    const TOKEN: &str = "IQoJb3JpZ2luX2VjEsimSESSIONtoken0123456789";
    let r = Redactor::new([TOKEN]);
    for (text, want) in [
        ("token IQoJb3JpZ2lu… was refused", "token [redacted]… was refused"),
        ("token IQoJb3JpZ2luX2VjEsim… was refused", "token [redacted]… was refused"),
        ("token …SESSIONtoken0123456789 was refused", "token …[redacted] was refused"),
        ("a: IQoJb3JpZ2luX2VjEsimSESSIONtoken0123456789, b: IQoJb3JpZ2lu", "a: [redacted], b: [redacted]"),
        // Eleven characters are no echo worth the name.
        ("token IQoJb3JpZ2l… was refused", "token IQoJb3JpZ2l… was refused"),
    ] {
        assert_eq!(r.scrub(text), want, "{text}");
    }
}

#[test]
fn cuts_keep_to_whole_characters() {
    let r = Redactor::new(["ééééééééé-secret"]);
    let text = "before ééééééééé-secret after, and ééé… and é-secret";
    let clean = r.scrub(text);
    assert_eq!(clean, "before [redacted] after, and ééé… and é-secret");
    let r = Redactor::new(["xéééééééééy"]);
    assert_eq!(r.scrub("aéééééééééb"), "a[redacted]b", "a run of twelve bytes inside the secret");
}

#[test]
fn well_known_key_shapes_and_signatures_are_redacted_even_when_not_ours() {
    let r = Redactor::default();
    let signature = format!("Signature={}", "0a1b2c3d".repeat(8));
    for (text, want) in [
        ("key sk-abcdefgh1234 refused", "key [redacted] refused"),
        ("key sk-proj-AbCd_EfGh-1234 refused", "key [redacted] refused"),
        ("key sk-ant-api03-xyzXYZ0123 refused", "key [redacted] refused"),
        ("key AIzaSyA1b2C3d4E5f6G7h8 refused", "key [redacted] refused"),
        (
            "Incorrect API key provided: sk-abc12***********************wxyz. You can find it",
            "Incorrect API key provided: [redacted]. You can find it",
        ),
        (
            &format!("SignedHeaders=host;x-amz-date, {signature}"),
            "SignedHeaders=host;x-amz-date, Signature=[redacted]",
        ),
    ] {
        assert_eq!(r.scrub(text), want, "{text}");
    }
}

#[test]
fn ordinary_words_are_not_mistaken_for_keys() {
    let r = Redactor::default();
    for text in [
        "the task-scheduler-queue is full",
        "disk-pressure-eviction on the node",
        "sk-short",
        "model gemini-2.5-flash is overloaded",
        "Missing bearer authentication header",
        "Signature=abc",
    ] {
        assert_eq!(r.scrub(text), text);
    }
}

#[test]
fn only_the_message_of_an_error_changes() {
    let e = UpstreamError::new(ErrorClass::Auth, Some(401), format!("bad key {PROVIDER}"))
        .with_retry_after(Some(Duration::from_secs(3)));
    let clean = redactor().scrub_error(e.clone());
    assert_eq!(clean.message, "bad key [redacted]");
    assert_eq!((clean.class, clean.status, clean.retry_after), (e.class, e.status, e.retry_after));
}

#[tokio::test]
async fn a_stream_broken_mid_way_is_scrubbed() {
    let items = vec![
        Ok(Event::TextDelta(format!("the model may say {PROVIDER}"))),
        Err(UpstreamError::new(ErrorClass::StreamBroken, None, format!("echo {CLIENT}"))),
    ];
    let stream: EventStream = Box::pin(futures::stream::iter(items));
    let got: Vec<_> = Arc::new(redactor()).scrub_stream(stream).collect().await;
    assert_eq!(got.len(), 2);
    // Answers are the model's and are passed on as they are; only error texts are scrubbed.
    assert!(matches!(&got[0], Ok(Event::TextDelta(t)) if t.contains(PROVIDER)));
    assert!(matches!(&got[1], Err(e) if e.message == "echo [redacted]"));
}

/// A call's redactor cuts the router's secrets, the call's key and what its cloud credentials
/// handed out, whether that was noted before the call or while it ran.
#[tokio::test]
async fn a_call_cuts_its_own_credentials_beside_the_routers() {
    let aws = Arc::new(crate::adapter::credentials::aws::AwsCredentials::default());
    let cloud =
        CloudAuth::Aws { region: "eu-west-1".into(), service: "bedrock", credentials: Arc::clone(&aws) };
    let upstream = Upstream {
        api_key: Some("bedrock-api-key-0123456789".into()),
        cloud: Some(cloud),
        ..Upstream::default()
    };
    let req = ChatRequest::default();
    let call = Call {
        redactor: Arc::new(redactor()),
        ..Call::as_written(WireFormat::Claude(&crate::adapter::provider::bedrock::Bedrock), upstream, &req)
    };
    let redactor = CallRedactor::of(&call);
    aws.held.note("wJalrXUtnFEMI/K7MDENG+bPxRfiCYsimSECRET");
    aws.held.note("IQoJb3JpZ2luX2VjEsimSESSIONtoken0123456789");
    let echoed = format!(
        "bad: {PROVIDER} {CLIENT} bedrock-api-key-0123456789 x-amz-security-token:IQoJb3JpZ2luX2VjEsimSESS… \
         secret wJalrXUtnFEMI/K7MDENG+bPxRfiCYsimSECRET; application/json"
    );
    let error = redactor.error(UpstreamError::new(ErrorClass::Auth, Some(403), echoed));
    assert_eq!(
        error.message,
        "bad: [redacted] [redacted] [redacted] x-amz-security-token:[redacted]… secret [redacted]; application/json"
    );
    // A token fetched later (the credentials rotated while the call ran) is cut as well.
    aws.held.note("IQoJrotatedSESSIONtoken9876543210");
    let later = UpstreamError::new(ErrorClass::Auth, Some(403), "token IQoJrotatedSESSIONtoken9876543210");
    assert_eq!(redactor.error(later).message, "token [redacted]");
    let mut results =
        serde_json::json!({"error": {"message": "key bedrock-api-key-0123456789", "code": 401}});
    redactor.resolve().json(&mut results);
    assert_eq!(results, serde_json::json!({"error": {"message": "key [redacted]", "code": 401}}));
}

#[test]
fn debug_never_shows_the_values() {
    let shown = format!("{:?}", redactor());
    assert!(!shown.contains(PROVIDER) && !shown.contains(CLIENT), "{shown}");
}
