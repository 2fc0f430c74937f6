"""Drives a router in front of the cloud providers' simulators with the official `openai` and
`anthropic` Python packages.

Usage: python clouds_sdk_check.py BASE_URL API_KEY SECRET...
Tasks the router must have: `azure` (Azure OpenAI's v1 API), `azure-legacy` (a legacy
deployment) and `spill` (an Azure backend that answers 429 with `retry-after-ms: 1500`, then
the legacy deployment). No answer may carry any of the SECRETs (the providers' keys).
Exits non-zero (with a traceback) on the first expectation that does not hold.
"""
import time

from clouds_common import claude, gpt, keep, messages, no_secret_seen

# Azure's v1 API: whole, then streamed with usage.
raw = gpt.chat.completions.with_raw_response.create(model="azure", messages=messages, max_tokens=6)
answer = raw.parse()
keep(raw.http_response.text)
assert raw.headers["x-spillway-backend"] == "azure-v1", raw.headers
assert answer.model == "azure" and answer.choices[0].message.content, answer
assert answer.usage.completion_tokens == 6, answer.usage
chunks = list(gpt.chat.completions.create(
    model="azure", messages=messages, max_tokens=5, stream=True, stream_options={"include_usage": True}
))
text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
keep(chunks)
assert len(text.split()) == 5, text
assert chunks[-1].usage.completion_tokens == 5, chunks[-1]

# A legacy deployment.
raw = gpt.chat.completions.with_raw_response.create(model="azure-legacy", messages=messages, max_tokens=4)
keep(raw.http_response.text)
assert raw.headers["x-spillway-backend"] == "azure-legacy", raw.headers
assert raw.parse().choices[0].message.content, raw.parse()

# A Messages client, translated to Azure's wire, whole and streamed.
message = claude.messages.create(model="azure", max_tokens=7, messages=messages)
keep(message)
assert message.content[0].text and message.usage.output_tokens == 7, message
with claude.messages.stream(model="azure-legacy", max_tokens=3, messages=messages) as stream:
    streamed = "".join(stream.text_stream)
assert len(streamed.split()) == 3, streamed


# Azure's 429 asks for 1,500 ms: the request fails over, the next ones skip the held backend
# without trying it, and once the wait is over it is tried again (milliseconds, not seconds).
def spill():
    raw = gpt.chat.completions.with_raw_response.create(model="spill", messages=messages, max_tokens=2)
    keep(raw.http_response.text)
    assert raw.headers["x-spillway-backend"] == "azure-legacy", raw.headers
    return int(raw.headers["x-spillway-attempts"])


held_at = time.monotonic()
assert spill() == 2, "the first request tries the limited backend and fails over"
assert spill() == 1, "the held backend is not tried"
# Each try is a whole request (the simulator's first token alone takes 50 ms): no pause needed.
while spill() == 1:
    assert time.monotonic() - held_at < 10, "the hold outlasted its 1,500 ms"
waited = time.monotonic() - held_at
assert waited >= 1.2, f"tried again after {waited:.2f} s, before the wait asked for"

no_secret_seen()
