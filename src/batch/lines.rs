//! A job's lines as the providers check them before it starts: an OpenAI input file (JSONL,
//! one `{"custom_id", "method": "POST", "url", "body"}` per line, every `url` the job's
//! endpoint) and an Anthropic `requests` list (`{"custom_id", "params"}`). A malformed line, a
//! repeated `custom_id` or a body that asks to stream fails the whole job at validation,
//! naming the line, as the providers do; what only running can tell (an unknown task, a body
//! the door refuses) is that line's own error line later. Pure: no I/O.

use std::collections::HashSet;

use serde_json::Value;

/// The endpoints a job's lines may name (OpenAI's list; Anthropic's is `/v1/messages`).
pub use crate::adapter::provider::OPENAI_ENDPOINTS as ENDPOINTS;

/// One line, ready to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub custom_id: String,
    /// The request body, as JSON text.
    pub request: String,
}

/// Why a line keeps its job from starting (OpenAI's `errors.data[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    pub code: &'static str,
    pub message: String,
    pub param: Option<String>,
    /// 1-based; `None` for the file as a whole.
    pub line: Option<usize>,
}

impl LineError {
    fn at(line: usize, code: &'static str, message: String, param: Option<&str>) -> LineError {
        LineError { code, message, param: param.map(str::to_string), line: Some(line) }
    }
}

/// The lines of an OpenAI input file for a job on `endpoint`, at most `max_lines` of them; or
/// every problem found (up to 100).
pub fn openai(text: &str, endpoint: &str, max_lines: usize) -> Result<Vec<Line>, Vec<LineError>> {
    let mut lines = Vec::new();
    let mut errors = Vec::new();
    let mut seen = HashSet::new();
    for (i, raw) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let n = i + 1;
        if errors.len() >= 100 {
            break;
        }
        let Ok(Value::Object(mut fields)) = serde_json::from_str::<Value>(raw) else {
            errors.push(LineError::at(
                n,
                "invalid_json_line",
                format!("line {n} is not a JSON object"),
                None,
            ));
            continue;
        };
        let text = |key: &str| fields.get(key).and_then(Value::as_str).map(str::to_string);
        let Some(custom_id) = text("custom_id").filter(|c| !c.is_empty()) else {
            let why = format!("line {n} has no `custom_id` string");
            errors.push(LineError::at(n, "missing_required_parameter", why, Some("custom_id")));
            continue;
        };
        if text("method").as_deref() != Some("POST") {
            let why = format!("line {n}: `method` must be POST");
            errors.push(LineError::at(n, "invalid_request", why, Some("method")));
            continue;
        }
        if text("url").as_deref() != Some(endpoint) {
            let why = format!("line {n}: `url` must be the batch's endpoint, {endpoint}");
            errors.push(LineError::at(n, "mismatched_endpoint", why, Some("url")));
            continue;
        }
        let body = match fields.remove("body") {
            Some(body @ Value::Object(_)) => body,
            _ => {
                let why = format!("line {n}: `body` must be an object");
                errors.push(LineError::at(n, "missing_required_parameter", why, Some("body")));
                continue;
            }
        };
        if asks_to_stream(&body) {
            let why = format!("line {n}: `body.stream` must not be true; a batch line is answered whole");
            errors.push(LineError::at(n, "invalid_request", why, Some("body.stream")));
            continue;
        }
        if !seen.insert(custom_id.clone()) {
            let why =
                format!("line {n}: `custom_id` `{custom_id}` is on an earlier line; each must be unique");
            errors.push(LineError::at(n, "duplicate_custom_id", why, Some("custom_id")));
            continue;
        }
        lines.push(Line { custom_id, request: body.to_string() });
    }
    if lines.len() > max_lines {
        let why = format!("the file has {} requests; a batch takes at most {max_lines}", lines.len());
        errors.push(LineError { code: "too_many_tasks", message: why, param: None, line: None });
    }
    if lines.is_empty() && errors.is_empty() {
        let why = "the file has no requests".to_string();
        errors.push(LineError { code: "empty_file", message: why, param: None, line: None });
    }
    if errors.is_empty() {
        Ok(lines)
    } else {
        Err(errors)
    }
}

/// The lines of an Anthropic `requests` list, at most `max_lines`; or the first problem, as
/// the param it names (`requests.2.custom_id`) and why.
pub fn anthropic(requests: &[Value], max_lines: usize) -> Result<Vec<Line>, (String, String)> {
    if requests.is_empty() || requests.len() > max_lines {
        return Err(("requests".into(), format!("must hold 1 to {max_lines} requests")));
    }
    let mut seen = HashSet::new();
    let mut lines = Vec::new();
    for (i, request) in requests.iter().enumerate() {
        let custom_id = request.get("custom_id").and_then(Value::as_str).unwrap_or_default();
        let well_formed = (1..=64).contains(&custom_id.len())
            && custom_id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !well_formed {
            let why = "must be 1 to 64 letters, digits, `_` or `-`".to_string();
            return Err((format!("requests.{i}.custom_id"), why));
        }
        if !seen.insert(custom_id) {
            let why = format!("`{custom_id}` is used by an earlier request; each must be unique");
            return Err((format!("requests.{i}.custom_id"), why));
        }
        let Some(params @ Value::Object(_)) = request.get("params") else {
            return Err((format!("requests.{i}.params"), "must be a Messages request object".into()));
        };
        if asks_to_stream(params) {
            let why = "must not be true; a batch request is answered whole".to_string();
            return Err((format!("requests.{i}.params.stream"), why));
        }
        lines.push(Line { custom_id: custom_id.to_string(), request: params.to_string() });
    }
    Ok(lines)
}

/// Whether a request body asks to stream: the providers refuse such a batch line.
fn asks_to_stream(body: &Value) -> bool {
    body.get("stream") == Some(&Value::Bool(true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(id: &str, url: &str) -> String {
        json!({"custom_id": id, "method": "POST", "url": url, "body": {"model": "t", "messages": []}})
            .to_string()
    }

    #[test]
    fn an_openai_file_reads_line_by_line_and_names_each_bad_line() {
        let good = [line("a", "/v1/chat/completions"), line("b", "/v1/chat/completions")].join("\n");
        let lines = openai(&good, "/v1/chat/completions", 10).unwrap();
        assert_eq!(lines.iter().map(|l| l.custom_id.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(serde_json::from_str::<Value>(&lines[0].request).unwrap()["model"], "t");

        let bad = [
            line("a", "/v1/chat/completions"),
            "{not json".to_string(),
            line("a", "/v1/chat/completions"),
            line("c", "/v1/embeddings"),
            json!({"method": "POST"}).to_string(),
        ]
        .join("\n");
        let errors = openai(&bad, "/v1/chat/completions", 10).unwrap_err();
        let found: Vec<(Option<usize>, &str)> = errors.iter().map(|e| (e.line, e.code)).collect();
        assert_eq!(
            found,
            [
                (Some(2), "invalid_json_line"),
                (Some(3), "duplicate_custom_id"),
                (Some(4), "mismatched_endpoint"),
                (Some(5), "missing_required_parameter")
            ]
        );
        assert_eq!(openai(&good, "/v1/chat/completions", 1).unwrap_err()[0].code, "too_many_tasks");
        assert_eq!(openai("\n\n", "/v1/chat/completions", 1).unwrap_err()[0].code, "empty_file");
    }

    #[test]
    fn anthropic_requests_need_unique_well_formed_ids() {
        let ok = [json!({"custom_id": "r-1", "params": {"model": "t"}})];
        assert_eq!(anthropic(&ok, 10).unwrap()[0].custom_id, "r-1");
        let twice = [ok[0].clone(), ok[0].clone()];
        assert_eq!(anthropic(&twice, 10).unwrap_err().0, "requests.1.custom_id");
        let bad_id = [json!({"custom_id": "no spaces", "params": {}})];
        assert_eq!(anthropic(&bad_id, 10).unwrap_err().0, "requests.0.custom_id");
        let no_params = [json!({"custom_id": "x"})];
        assert_eq!(anthropic(&no_params, 10).unwrap_err().0, "requests.0.params");
        assert_eq!(anthropic(&[], 10).unwrap_err().0, "requests");
    }

    #[test]
    fn a_line_that_asks_to_stream_is_refused_naming_it() {
        let mut streamed: Value = serde_json::from_str(&line("s", "/v1/chat/completions")).unwrap();
        streamed["body"]["stream"] = json!(true);
        let text = [line("a", "/v1/chat/completions"), streamed.to_string()].join("\n");
        let errors = openai(&text, "/v1/chat/completions", 10).unwrap_err();
        let found: Vec<_> = errors.iter().map(|e| (e.line, e.code, e.param.as_deref())).collect();
        assert_eq!(found, [(Some(2), "invalid_request", Some("body.stream"))]);
        streamed["body"]["stream"] = json!(false);
        let text = [line("a", "/v1/chat/completions"), streamed.to_string()].join("\n");
        assert_eq!(openai(&text, "/v1/chat/completions", 10).unwrap().len(), 2, "stream: false is fine");

        let ok = json!({"custom_id": "a", "params": {"model": "t"}});
        let streaming = json!({"custom_id": "b", "params": {"model": "t", "stream": true}});
        assert_eq!(anthropic(&[ok.clone(), streaming], 10).unwrap_err().0, "requests.1.params.stream");
        let not_streaming = json!({"custom_id": "b", "params": {"model": "t", "stream": false}});
        assert_eq!(anthropic(&[ok, not_streaming], 10).unwrap().len(), 2);
    }
}
