"""Drives a running `spillway serve`'s batch APIs with the official `openai` and `anthropic`
Python packages: files.create(purpose="batch"), batches.create, polling batches.retrieve,
files.content of the output and error files; messages.batches.create, retrieve, results.

Usage: python batch_sdk_check.py BASE_URL API_KEY
The router must have a task `chat` on a fleet node. Polls every 0.2 s, as a client does, for at
most 60 s. Exits non-zero (with a traceback) on the first expectation that does not hold.
"""
import json
import sys
import time

import anthropic
import openai

base_url, api_key = sys.argv[1], sys.argv[2]


def poll(fetch, ended):
    deadline = time.time() + 60
    job = fetch()
    while not ended(job):
        assert time.time() < deadline, job
        time.sleep(0.2)
        job = fetch()
    return job


# OpenAI: a file of chat lines, one of them for a task that does not exist.
client = openai.OpenAI(base_url=base_url + "/v1", api_key=api_key, max_retries=0)
lines = [
    {"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions",
     "body": {"model": "chat", "max_tokens": 4, "messages": [{"role": "user", "content": f"question {i}"}]}}
    for i in range(4)
]
lines.append(dict(lines[0], custom_id="lost", body=dict(lines[0]["body"], model="no-such-task")))
uploaded = client.files.create(file=("nightly.jsonl", "\n".join(map(json.dumps, lines)).encode()), purpose="batch")
assert uploaded.purpose == "batch" and uploaded.bytes > 0, uploaded
assert client.files.retrieve(uploaded.id).filename == "nightly.jsonl"
batch = client.batches.create(
    input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h", metadata={"run": "sdk"}
)
assert batch.status == "validating", batch
batch = poll(lambda: client.batches.retrieve(batch.id), lambda b: b.status in ("completed", "failed", "expired"))
assert batch.status == "completed", batch
assert (batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed) == (5, 4, 1), batch
assert batch.metadata["run"] == "sdk" and batch.metadata["spillway_route"] == "fleet", batch
output = [json.loads(line) for line in client.files.content(batch.output_file_id).text.splitlines()]
assert [o["custom_id"] for o in output] == ["q0", "q1", "q2", "q3"], output
for o in output:
    assert o["response"]["status_code"] == 200, o
    assert o["response"]["body"]["choices"][0]["message"]["content"], o
errors = [json.loads(line) for line in client.files.content(batch.error_file_id).text.splitlines()]
assert [(e["custom_id"], e["response"]["status_code"]) for e in errors] == [("lost", 404)], errors
assert any(b.id == batch.id for b in client.batches.list(limit=10).data)
try:
    client.files.create(file=("x.jsonl", b"{}"), purpose="fine-tune")
    raise AssertionError("a fine-tune file was accepted")
except openai.BadRequestError as e:
    assert e.body["param"] == "purpose", e.body
assert client.files.delete(uploaded.id).deleted

# Anthropic: Message Batches.
claude = anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0)
requests = [
    {"custom_id": f"m{i}", "params": {"model": "chat", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}}
    for i in range(3)
]
created = claude.messages.batches.create(requests=requests)
assert created.processing_status == "in_progress", created
ended = poll(lambda: claude.messages.batches.retrieve(created.id), lambda b: b.processing_status == "ended")
assert ended.request_counts.succeeded == 3 and ended.request_counts.errored == 0, ended
results = list(claude.messages.batches.results(created.id))
assert [r.custom_id for r in results] == ["m0", "m1", "m2"], results
for r in results:
    assert r.result.type == "succeeded", r
    assert r.result.message.content[0].text, r
print("ok")
