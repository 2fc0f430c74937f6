"""Drives a router in front of Google Vertex AI's simulators with the official `anthropic` and
`openai` Python packages.

Usage: python vertex_sdk_check.py BASE_URL API_KEY SECRET...
Tasks the router must have: `vertex-claude` (Claude on Vertex AI), `vertex-gemini` (Gemini
on Vertex AI) and `vertex-own-file` (Claude with the backend's own credentials file). No answer may carry any of the SECRETs.
Exits non-zero (with a traceback) on the first expectation that does not hold.
"""
from clouds_common import claude, keep, messages, no_secret_seen, openai_whole_and_streamed

# Messages clients to Claude on Vertex, whole and streamed, with a beta the clouds take and one
# they do not (Vertex would refuse it).
betas = {"anthropic-beta": "claude-code-20250219,context-1m-2025-08-07"}
raw = claude.messages.with_raw_response.create(
    model="vertex-claude", max_tokens=7, messages=messages, extra_headers=betas
)
keep(raw.http_response.text)
message = raw.parse()
assert raw.headers["x-spillway-backend"] == "vertex-claude", raw.headers
assert message.content[0].text and message.usage.output_tokens == 7, message
with claude.messages.stream(model="vertex-claude", max_tokens=4, messages=messages, extra_headers=betas) as stream:
    streamed = "".join(stream.text_stream)
    final = stream.get_final_message()
keep(final)
assert len(streamed.split()) == 4 and final.usage.output_tokens == 4, (streamed, final.usage)

# Claude's own count, through Vertex's count-tokens route: exact.
raw = claude.messages.with_raw_response.count_tokens(model="vertex-claude", messages=messages)
keep(raw.http_response.text)
assert raw.headers["x-spillway-token-count"] == "exact", raw.headers
assert raw.parse().input_tokens > 0, raw.parse()

# OpenAI clients to both publishers, whole and streamed.
for task in ["vertex-claude", "vertex-gemini"]:
    openai_whole_and_streamed(task, task)

# A backend with its own credentials file.
for _ in range(3):
    raw = claude.messages.with_raw_response.create(model="vertex-own-file", max_tokens=2, messages=messages)
    keep(raw.http_response.text)
    assert raw.headers["x-spillway-backend"] == "vertex-own-file", raw.headers

no_secret_seen()
