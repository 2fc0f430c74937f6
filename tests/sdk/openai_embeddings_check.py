"""Drives a running `spillway serve` with the official `openai` Python package's embeddings and
legacy completions.

Usage: python openai_embeddings_check.py BASE_URL API_KEY
Exits non-zero (with a traceback) on the first expectation that does not hold.
"""
import base64
import math
import struct
import sys

import openai

base_url, api_key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=api_key, max_retries=0, timeout=20)
texts = ["disk full on db-1", "cpu hot on web-3"]

# Embeddings as floats: one unit vector per input, at the asked dimensions, the task as model.
raw = client.embeddings.with_raw_response.create(
    model="search", input=texts, dimensions=16, encoding_format="float"
)
floats = raw.parse()
assert raw.headers["x-spillway-backend"] == "embedder", raw.headers
assert floats.model == "search", floats
assert [d.index for d in floats.data] == [0, 1], floats.data
assert all(len(d.embedding) == 16 for d in floats.data), floats.data
assert abs(math.sqrt(sum(x * x for x in floats.data[0].embedding)) - 1) < 1e-4
assert floats.data[0].embedding != floats.data[1].embedding
assert floats.usage.prompt_tokens > 0 and floats.usage.total_tokens == floats.usage.prompt_tokens, floats.usage

# No encoding_format: the SDK asks for base64 and decodes the vectors itself; the same vectors.
decoded = client.embeddings.create(model="search", input=texts, dimensions=16)
for a, b in zip(floats.data, decoded.data):
    assert len(b.embedding) == 16 and all(abs(x - y) < 1e-6 for x, y in zip(a.embedding, b.embedding)), b

# base64 asked for explicitly: the SDK hands the text over; it is little-endian f32.
explicit = client.embeddings.create(model="search", input=texts[0], dimensions=16, encoding_format="base64")
vector = struct.unpack("<16f", base64.b64decode(explicit.data[0].embedding))
assert all(abs(x - y) < 1e-6 for x, y in zip(vector, floats.data[0].embedding)), vector

# Token ids embed too.
tokens = client.embeddings.create(model="search", input=[[101, 2023, 102]], encoding_format="float")
assert len(tokens.data) == 1 and tokens.usage.prompt_tokens == 3, tokens

# Bad input and a task without an embedding space are the client's errors.
try:
    client.embeddings.create(model="search", input=[{"text": "x"}])
    raise AssertionError("an object input was accepted")
except openai.BadRequestError as e:
    assert e.status_code == 400 and "input[0]" in str(e), e
try:
    client.embeddings.create(model="legacy", input="x")
    raise AssertionError("embeddings from a task without an embedding space")
except openai.BadRequestError as e:
    assert "embedding_space" in str(e), e

# Legacy completions, whole.
completion = client.completions.create(model="legacy", prompt="Once upon a time", max_tokens=5)
assert completion.object == "text_completion" and completion.model == "legacy", completion
assert completion.choices[0].text.strip(), completion
assert completion.choices[0].finish_reason == "length", completion
assert completion.usage.completion_tokens == 5, completion.usage

# Streamed, with usage.
stream = client.completions.create(
    model="legacy", prompt=["Once upon"], max_tokens=4, stream=True, stream_options={"include_usage": True}
)
text, usage, finishes = "", None, []
for chunk in stream:
    assert chunk.model == "legacy", chunk
    if chunk.usage is not None:
        usage = chunk.usage
    for choice in chunk.choices:
        text += choice.text
        if choice.finish_reason:
            finishes.append(choice.finish_reason)
assert len(text.split()) == 4, text
assert finishes == ["length"], finishes
assert usage is not None and usage.completion_tokens == 4, usage

# A completions stream that breaks after its first tokens raises in the SDK.
got = ""
try:
    for chunk in client.completions.create(model="broken", prompt="Once", max_tokens=30, stream=True):
        for choice in chunk.choices:
            got += choice.text
    raise AssertionError(f"broken stream ended cleanly after {got!r}")
except openai.APIError:
    assert got.strip(), "the error should come after some text"
    assert len(got.split()) <= 3, got

print("openai SDK", openai.__version__, "embeddings and completions ok")
