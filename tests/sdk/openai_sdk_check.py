"""Drives a running `spillway serve` with the official `openai` Python package.

Usage: python openai_sdk_check.py BASE_URL API_KEY
Exits non-zero (with a traceback) on the first expectation that does not hold.
"""
import sys

import openai

base_url, api_key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=api_key, max_retries=0, timeout=20)
messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Summarise: disk full"}]

# Non-streaming.
raw = client.chat.completions.with_raw_response.create(model="chat", messages=messages, max_tokens=8)
completion = raw.parse()
assert raw.headers["x-spillway-backend"] == "local", raw.headers
assert completion.choices[0].message.role == "assistant"
assert completion.choices[0].message.content, completion
assert completion.usage.completion_tokens == 8, completion.usage
assert completion.choices[0].finish_reason == "length"

# Streaming with usage.
stream = client.chat.completions.create(
    model="chat", messages=messages, max_tokens=6, stream=True, stream_options={"include_usage": True}
)
text, usage, finishes = "", None, []
for chunk in stream:
    if chunk.usage is not None:
        usage = chunk.usage
    for choice in chunk.choices:
        text += choice.delta.content or ""
        if choice.finish_reason:
            finishes.append(choice.finish_reason)
assert text.strip(), "streamed text is empty"
assert finishes == ["length"], finishes
assert usage is not None and usage.completion_tokens == 6, usage

# Models: the tasks this key may use.
assert sorted(m.id for m in client.models.list()) == ["broken", "chat"]

# Errors surface as the SDK's typed exceptions.
try:
    client.chat.completions.create(model="no-such-task", messages=messages)
    raise AssertionError("unknown task accepted")
except openai.NotFoundError as e:
    assert e.status_code == 404
try:
    openai.OpenAI(base_url=f"{base_url}/v1", api_key="wrong", max_retries=0).models.list()
    raise AssertionError("bad key accepted")
except openai.AuthenticationError:
    pass
try:
    client.chat.completions.create(model="chat", messages=[])
    raise AssertionError("empty messages accepted")
except openai.BadRequestError as e:
    assert "messages" in str(e)

# A stream that breaks after its first tokens raises in the SDK instead of ending cleanly.
got = ""
try:
    for chunk in client.chat.completions.create(model="broken", messages=messages, max_tokens=30, stream=True):
        for choice in chunk.choices:
            got += choice.delta.content or ""
    raise AssertionError(f"broken stream ended cleanly after {got!r}")
except openai.APIError as e:
    assert got.strip(), "the error should come after some text"
    assert len(got.split()) <= 3, got

print("openai SDK", openai.__version__, "ok")
