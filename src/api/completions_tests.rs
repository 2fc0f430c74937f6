use super::*;
use crate::canonical::Input;
use serde_json::json;

fn decode(body: Value, cap: Option<u32>) -> Result<ChatRequest, ApiError> {
    let request: CompletionsRequest =
        wire::decode_json(body.to_string().as_bytes(), "a completions request")?;
    request.to_canonical(cap)
}

#[test]
fn a_request_decodes_to_a_completion_that_keeps_the_other_members() {
    let req = decode(
        json!({"model": "legacy", "prompt": [[1, 2], [3]], "max_tokens": 50, "temperature": 0.2,
               "stop": "\n", "stream": true, "stream_options": {"include_usage": true}, "echo": true,
               "logprobs": 3, "suffix": "end", "n": 2, "seed": 9, "presence_penalty": 0.1,
               "top_k": 20}),
        Some(32),
    )
    .unwrap();
    assert_eq!(
        (req.max_tokens, req.temperature, req.seed),
        (Some(32), Some(0.2), Some(9)),
        "capped by the task"
    );
    assert_eq!(req.stop, ["\n"]);
    assert!(req.stream && req.messages.is_empty());
    let Operation::Completion(completion) = req.operation else { panic!("{:?}", req.operation) };
    assert_eq!(completion.prompt, Input::TokenLists(vec![vec![1, 2], vec![3]]));
    assert!(completion.stream);
    assert_eq!(
        (completion.echo, completion.logprobs, completion.suffix.as_deref(), completion.n),
        (Some(true), Some(3), Some("end"), Some(2))
    );
    assert_eq!(
        Value::Object(completion.passthrough),
        json!({"presence_penalty": 0.1, "top_k": 20}),
        "the checked members are not passed twice"
    );

    let plain = decode(json!({"model": "legacy", "prompt": ""}), None).unwrap();
    assert_eq!(plain.max_tokens, None, "the upstream's own default");
    assert!(!plain.stream);
}

#[test]
fn bad_requests_name_their_field() {
    let cases = [
        (json!({"model": "legacy"}), "prompt"),
        (json!({"model": "legacy", "prompt": {"text": "x"}}), "prompt"),
        (json!({"model": "legacy", "prompt": ["a", 3]}), "prompt[1]"),
        (json!({"model": "legacy", "prompt": "a", "temperature": 3}), "temperature"),
        (json!({"model": "legacy", "prompt": "a", "top_p": -1}), "top_p"),
        (json!({"model": "legacy", "prompt": "a", "n": 0}), "n"),
        (json!({"model": "legacy", "prompt": "a", "max_tokens": "ten"}), "max_tokens"),
        (json!({"model": "legacy", "prompt": "a", "stop": 5}), "stop"),
        (json!({"model": "legacy", "prompt": "a", "echo": "yes"}), "echo"),
    ];
    for (body, param) in cases {
        let error = decode(body.clone(), None).unwrap_err();
        assert_eq!(error.param.as_deref(), Some(param), "{body}: {error:?}");
        assert_eq!(error.status, 400, "{body}");
    }
}

#[test]
fn a_whole_answer_is_the_upstreams_under_the_routers_head() {
    let relayed = RelayChunk {
        fields: r##","choices":[{"index":0,"text":" hi","logprobs":null,"finish_reason":"stop"}],"system_fingerprint":"fp""##
            .as_bytes()
            .to_vec()
            .into(),
        usage: Some(r#"{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}"#.as_bytes().to_vec().into()),
        no_choices: false,
        output: false,
    };
    let usage = Usage { input_tokens: 3, cached_input_tokens: 0, output_tokens: 1, cache_write_tokens: 0 };
    let body: Value =
        serde_json::from_slice(&answer_body("cmpl-1", "legacy", 7, Some(relayed.clone()), &usage)).unwrap();
    assert_eq!(
        body,
        json!({"id": "cmpl-1", "object": "text_completion", "created": 7, "model": "legacy",
               "choices": [{"index": 0, "text": " hi", "logprobs": null, "finish_reason": "stop"}],
               "system_fingerprint": "fp",
               "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}})
    );
    // An upstream that wrote no usage: the usage as read (from a stream, say).
    let bare = RelayChunk { usage: None, ..relayed };
    let body: Value =
        serde_json::from_slice(&answer_body("cmpl-1", "legacy", 7, Some(bare), &usage)).unwrap();
    assert_eq!(body["usage"]["total_tokens"], 4);
}
