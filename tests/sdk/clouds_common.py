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


def no_secret_seen():
    """No SECRET in anything the client got; then say ok."""
    for secret in secrets:
        assert not any(secret in s for s in seen), "a credential reached the client"
    print("ok")
