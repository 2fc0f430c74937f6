"""Drives a router in front of Amazon Bedrock's simulators with the official `anthropic` and
`openai` Python packages.

Usage: python bedrock_sdk_check.py BASE_URL API_KEY SECRET...
Tasks the router must have: `signed` (Bedrock with SigV4 and a session token), `keyed` (Bedrock
with a Bedrock API key), `broken-stream` (a Bedrock backend whose streams open with an
exception, then `keyed`), `invalid` (a Bedrock backend that refuses with a ValidationException,
then a backend only it uses), `llama` (a Bedrock model that speaks Converse, calling tools with {"city": "Oslo"}),
`think-bedrock` (Bedrock), `think-anthropic` (Anthropic),
`think-chain` (Anthropic, then Bedrock), `wrong-key` and `wrong-secret` (Bedrock refusing the
credentials it was sent, echoing them). No answer may carry any of the SECRETs.
Exits non-zero (with a traceback) on the first expectation that does not hold.
"""
import json

import anthropic

from clouds_common import claude, gpt, keep, messages, no_secret_seen, openai_whole_and_streamed

for task in ["signed", "keyed"]:
    # Claude's own count, through Bedrock's CountTokens: exact.
    raw = claude.messages.with_raw_response.count_tokens(model=task, messages=messages)
    keep(raw.http_response.text)
    assert raw.headers["x-spillway-token-count"] == "exact", raw.headers
    assert raw.parse().input_tokens > 0, raw.parse()
    # Messages clients, whole and streamed, with a beta Bedrock takes and one it does not.
    betas = {"anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14"}
    raw = claude.messages.with_raw_response.create(
        model=task, max_tokens=7, messages=messages, extra_headers=betas
    )
    keep(raw.http_response.text)
    message = raw.parse()
    assert raw.headers["x-spillway-backend"] == f"bedrock-{task}", raw.headers
    assert message.content[0].text and message.usage.output_tokens == 7, message
    with claude.messages.stream(model=task, max_tokens=4, messages=messages, extra_headers=betas) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    keep(final)
    assert len(streamed.split()) == 4 and final.usage.output_tokens == 4, (streamed, final.usage)
    # An OpenAI client, translated to Claude's body, whole and streamed.
    openai_whole_and_streamed(task, f"bedrock-{task}")

# A model that is not Claude speaks Converse: whole, streamed, and a tool call streamed in
# pieces and folded; a history holding that call and its result goes back without the tools
# declared (Bedrock refuses such a history without a toolConfig: the router declares them).
openai_whole_and_streamed("llama", "bedrock-llama")
weather = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
ask = [{"role": "user", "content": "Weather in Oslo?"}]
chunks = list(gpt.chat.completions.create(model="llama", messages=ask, tools=weather, stream=True))
keep(chunks)
calls = [t for c in chunks if c.choices for t in (c.choices[0].delta.tool_calls or [])]
arguments = "".join(t.function.arguments or "" for t in calls)
assert calls[0].function.name == "weather" and json.loads(arguments) == {"city": "Oslo"}, calls
history = ask + [
    {"role": "assistant", "tool_calls": [{"id": calls[0].id, "type": "function", "function": {"name": "weather", "arguments": arguments}}]},
    {"role": "tool", "tool_call_id": calls[0].id, "content": '{"temp": 3}'},
]
answer = gpt.chat.completions.create(model="llama", messages=history, max_tokens=4)
assert answer.choices[0].message.content, answer

# A stream that opens with an exception fails over before the client sees anything.
with claude.messages.stream(model="broken-stream", max_tokens=3, messages=messages) as stream:
    streamed = "".join(stream.text_stream)
    headers = stream.response.headers
assert headers["x-spillway-backend"] == "bedrock-keyed" and headers["x-spillway-attempts"] == "2", headers
assert len(streamed.split()) == 3, streamed

# A ValidationException is the request's fault: not tried elsewhere, and its words reach the client.
try:
    claude.messages.create(model="invalid", max_tokens=3, messages=messages)
    raise AssertionError("the invalid request was answered")
except anthropic.BadRequestError as e:
    keep(e.response.text)
    assert e.status_code == 400 and "simulated failure (400)" in e.message, e.message

# Thinking signed on Bedrock comes to the client marked with its signer. Sent back to Bedrock
# it goes as Bedrock made it; sent to Anthropic, the block is dropped and thinking is off for
# that attempt (Anthropic would refuse Bedrock's signature). An unmarked foreign signature is
# refused by Anthropic with a 400, the request's fault: not tried on Bedrock.
thinking = {"type": "enabled", "budget_tokens": 1024}
first = claude.messages.create(model="think-bedrock", max_tokens=2048, thinking=thinking, messages=messages)
keep(first)
signed = next(b for b in first.content if b.type == "thinking")
assert signed.signature.startswith("spillway:bedrock:"), signed
history = messages + [
    {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
    {"role": "user", "content": "And node 4?"},
]
for task in ["think-bedrock", "think-anthropic"]:
    raw = claude.messages.with_raw_response.create(model=task, max_tokens=2048, thinking=thinking, messages=history)
    keep(raw.http_response.text)
    assert raw.parse().content, raw.parse()
unmarked = [dict(m) for m in history]
unmarked[1] = {"role": "assistant", "content": [
    {**b.model_dump(exclude_none=True), "signature": signed.signature.removeprefix("spillway:bedrock:")}
    if b.type == "thinking" else b.model_dump(exclude_none=True) for b in first.content]}
try:
    claude.messages.create(model="think-chain", max_tokens=2048, thinking=thinking, messages=unmarked)
    raise AssertionError("Anthropic took Bedrock's signature")
except anthropic.BadRequestError as e:
    assert "Invalid `signature`" in e.message, e.message

# A wrong key and a wrong signature, refused by Bedrock in words that echo what it was sent
# (the bearer token; the canonical request with the session token): the client sees the
# refusal, never the credential.
for task in ["wrong-key", "wrong-secret"]:
    try:
        claude.messages.create(model=task, max_tokens=3, messages=messages)
        raise AssertionError(f"{task} was answered")
    except anthropic.APIStatusError as e:
        keep(e.response.text)
        assert "redacted]" in e.message, e.message

no_secret_seen()
