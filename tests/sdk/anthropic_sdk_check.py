"""Drives a running `spillway serve` with the official `anthropic` Python package.

Usage: python anthropic_sdk_check.py BASE_URL API_KEY
Tasks the router must have: `coder` (a fleet node that calls `get_weather` when tools are
offered), `claude-only` (an Anthropic backend), `broken` (a node that drops every stream after
a few tokens) and `overloaded` (an Anthropic backend that answers 529).
Exits non-zero (with a traceback) on the first expectation that does not hold.
"""
import sys

import anthropic

base_url, api_key = sys.argv[1], sys.argv[2]
client = anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0, timeout=20)
messages = [{"role": "user", "content": "Summarise: disk full on node 3"}]

# Non-streaming, translated to a fleet node's chat completions.
raw = client.messages.with_raw_response.create(model="coder", max_tokens=8, system="be brief", messages=messages)
message = raw.parse()
assert raw.headers["x-spillway-backend"] == "local", raw.headers
assert message.type == "message" and message.role == "assistant", message
assert message.model == "coder", message
assert message.content[0].type == "text" and message.content[0].text, message
assert message.stop_reason == "max_tokens", message
assert message.usage.output_tokens == 8, message.usage

# Streaming, through the SDK's own accumulator.
with client.messages.stream(model="claude-only", max_tokens=6, messages=messages) as stream:
    text = "".join(stream.text_stream)
    final = stream.get_final_message()
assert text.strip(), "streamed text is empty"
assert final.content[0].text == text, (final, text)
assert final.usage.output_tokens == 6, final.usage
assert final.stop_reason == "max_tokens", final

# Token counting: Anthropic's own count for an Anthropic backend.
count = client.messages.count_tokens(model="claude-only", messages=messages)
assert count.input_tokens > 0, count

# Tool use, and the round trip with its result.
tools = [{"name": "get_weather", "description": "Weather now", "input_schema": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
asked = [{"role": "user", "content": "Weather in Paris?"}]
call = client.messages.create(model="coder", max_tokens=64, tools=tools, messages=asked)
assert call.stop_reason == "tool_use", call
use = next(b for b in call.content if b.type == "tool_use")
assert use.name == "get_weather" and use.input == {"city": "Paris"}, use
with client.messages.stream(model="coder", max_tokens=64, tools=tools, messages=asked) as stream:
    streamed = stream.get_final_message()
streamed_use = next(b for b in streamed.content if b.type == "tool_use")
assert streamed_use.input == {"city": "Paris"}, streamed
answered = asked + [
    {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in call.content]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "18 C, clear"}]},
]
final = client.messages.create(model="coder", max_tokens=8, tools=tools, messages=answered)
assert final.content[0].type == "text" and final.stop_reason != "tool_use", final

# Errors raise the SDK's classes.
def raises(kind, call):
    try:
        call()
    except kind as e:
        return e
    raise AssertionError(f"expected {kind.__name__}")

e = raises(anthropic.NotFoundError, lambda: client.messages.create(model="no-such-task", max_tokens=5, messages=messages))
assert e.status_code == 404 and "no-such-task" in e.message, e
e = raises(anthropic.BadRequestError, lambda: client.messages.create(
    model="coder", max_tokens=5, messages=[{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_nowhere", "content": "x"}]}]))
assert "tool_use_id" in e.message, e
e = raises(anthropic.AuthenticationError, lambda: anthropic.Anthropic(
    base_url=base_url, api_key="wrong", max_retries=0).messages.create(model="coder", max_tokens=5, messages=messages))
assert e.body["error"]["type"] == "authentication_error", e.body
e = raises(anthropic.OverloadedError, lambda: client.messages.create(model="overloaded", max_tokens=5, messages=messages))
assert e.status_code == 529, e

# A stream that breaks after its first tokens raises; it never ends as if whole.
def read_broken():
    with client.messages.stream(model="broken", max_tokens=50, messages=messages) as stream:
        for _ in stream.text_stream:
            pass
        stream.get_final_message()

e = raises(anthropic.APIStatusError, read_broken)
assert e.body["type"] == "error", e.body

# Models, in Anthropic's list shape.
ids = [m.id for m in client.models.list()]
assert ids == ["coder", "claude-sonnet-4-6", "claude-only", "broken", "overloaded"], ids
assert client.messages.create(model="claude-sonnet-4-6", max_tokens=4, messages=messages).model == "claude-sonnet-4-6"

print("ok")
