"""What the cloud providers' SDK checks share: the command line (BASE_URL API_KEY SECRET...),
the official clients pointed at the router, every answer kept, and the check that no SECRET
reached the client."""
import sys

import anthropic
import openai

base_url, api_key, secrets = sys.argv[1], sys.argv[2], sys.argv[3:]
claude = anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0, timeout=20)
gpt = openai.OpenAI(base_url=f"{base_url}/v1", api_key=api_key, max_retries=0, timeout=20)
messages = [{"role": "user", "content": "Summarise: disk full on node 3"}]
seen = []


def keep(text):
    """Keep what the client got, for the secrets check."""
    seen.append(str(text))
    return text


def openai_whole_and_streamed(task, backend=None):
    """An OpenAI client to `task`: 5 tokens whole, then 3 streamed with usage (and, when
    `backend` is named, the whole answer served by it)."""
    raw = gpt.chat.completions.with_raw_response.create(model=task, messages=messages, max_tokens=5)
    keep(raw.http_response.text)
    answer = raw.parse()
    assert backend is None or raw.headers["x-spillway-backend"] == backend, raw.headers
    assert answer.choices[0].message.content and answer.usage.completion_tokens == 5, answer
    chunks = list(gpt.chat.completions.create(
        model=task, messages=messages, max_tokens=3, stream=True, stream_options={"include_usage": True}
    ))
    keep(chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text.split()) == 3 and chunks[-1].usage.completion_tokens == 3, chunks


def no_secret_seen():
    """No SECRET in anything the client got; then say ok."""
    for secret in secrets:
        assert not any(secret in s for s in seen), "a credential reached the client"
    print("ok")
