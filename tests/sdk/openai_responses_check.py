"""Drives `client.responses` of the official `openai` Python package against a running
`spillway serve`, and against `spillway sim` directly (the simulator speaks the wire too).

Usage: python openai_responses_check.py ROUTER_URL API_KEY SIM_URL
The router serves tasks `chat` (a healthy node), `broken` (a node that drops its stream after
three tokens), `tools` (a node that calls the declared tool with {"city": "Paris"}) and
`stored` (an OpenAI simulator first, then the healthy node).
Exits non-zero (with a traceback) on the first expectation that does not hold.
"""
import json
import sys

import openai

router_url, api_key, sim_url = sys.argv[1], sys.argv[2], sys.argv[3]
client = openai.OpenAI(base_url=f"{router_url}/v1", api_key=api_key, max_retries=0, timeout=20)
sim = openai.OpenAI(base_url=f"{sim_url}/v1", api_key="unused", max_retries=0, timeout=20)
ORDER = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
]


def check_text_stream(events, end):
    """The event types of a one-message answer, in OpenAI's order, numbered from 0."""
    kinds = [e.type for e in events]
    collapsed = [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]]
    assert collapsed == ORDER + [end], kinds
    assert [e.sequence_number for e in events] == list(range(len(events))), events
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text.strip() and events[-1].response.output_text == text, (text, events[-1])
    return events[-1].response


# Non-streamed: the SDK's Response, its output_text and usage.
raw = client.responses.with_raw_response.create(
    model="chat", instructions="be brief", input="Summarise: disk full", max_output_tokens=8
)
response = raw.parse()
assert raw.headers["x-spillway-backend"] == "local", raw.headers
assert response.id.startswith("resp_") and response.object == "response", response
assert response.model == "chat" and response.instructions == "be brief", response
assert response.output_text.strip(), response
assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens", response
assert response.usage.output_tokens == 8 and response.usage.input_tokens > 0, response.usage
assert response.usage.total_tokens == response.usage.input_tokens + 8, response.usage

# Streamed: every event in order, usage on the last.
events = list(client.responses.create(model="chat", input=[{"role": "user", "content": "hi"}], stream=True))
done = check_text_stream(events, "response.completed")
assert done.status == "completed" and done.usage.output_tokens > 0, done

# The SDK's own stream helper checks every item and index it is told about.
with client.responses.stream(model="chat", input="hi", max_output_tokens=200) as stream:
    seen = [event.type for event in stream]
    final = stream.get_final_response()
assert seen[-1] == "response.completed" and final.output_text.strip(), (seen, final)

# A function tool round trip: the call, then its output sent back with the history.
tools = [{"type": "function", "name": "get_weather", "description": "weather for a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
question = {"role": "user", "content": "Weather in Paris?"}
first = client.responses.create(model="tools", input=[question], tools=tools)
calls = [item for item in first.output if item.type == "function_call"]
assert len(calls) == 1 and calls[0].name == "get_weather", first.output
assert json.loads(calls[0].arguments) == {"city": "Paris"}, calls[0]
assert first.tools[0].name == "get_weather", first.tools
history = [question] + [item.model_dump(exclude_none=True) for item in first.output]
history.append({"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 21 C"})
second = client.responses.create(model="tools", input=history, tools=tools)
assert second.output_text.strip() and not [i for i in second.output if i.type == "function_call"], second.output

# The same call streamed: argument deltas add up to the arguments.
streamed = list(client.responses.create(model="tools", input=[question], tools=tools, stream=True))
deltas = "".join(e.delta for e in streamed if e.type == "response.function_call_arguments.delta")
args_done = [e for e in streamed if e.type == "response.function_call_arguments.done"]
assert len(args_done) == 1 and args_done[0].arguments == deltas and json.loads(deltas) == {"city": "Paris"}, streamed
assert streamed[-1].type == "response.completed", streamed[-1]
assert streamed[-1].response.output[0].type == "function_call", streamed[-1]

# Stateless: asking for a stored response is the SDK's BadRequestError, naming the field.
try:
    client.responses.create(model="chat", input="hi", previous_response_id="resp_123")
    raise AssertionError("previous_response_id accepted")
except openai.BadRequestError as e:
    assert e.param == "previous_response_id" and "stateless" in str(e), e
try:
    client.responses.create(model="chat", input=[{"type": "computer_call_output", "call_id": "c"}])
    raise AssertionError("unknown item type accepted")
except openai.BadRequestError as e:
    assert e.param == "input[0].type", e

# ...unless the task's first backend is OpenAI: then it passes through, pinned there, and the
# answer is OpenAI's own (its response id, the fields echoed), streamed or not.
kept = client.responses.with_raw_response.create(
    model="stored", input="and then?", previous_response_id="resp_123", store=True, max_output_tokens=5
)
assert kept.headers["x-spillway-backend"] == "openai", kept.headers
kept = kept.parse()
assert kept.previous_response_id == "resp_123" and kept.store is True and kept.model == "stored", kept
assert kept.id.startswith("resp_sim") and kept.output_text.strip(), kept
with client.responses.stream(model="stored", input="hi", previous_response_id="resp_123") as stream:
    relayed = [event.type for event in stream]
    final = stream.get_final_response()
assert relayed[0] == "response.created" and relayed[-1] == "response.completed", relayed
assert final.previous_response_id == "resp_123" and final.id.startswith("resp_sim"), final

# A stream that breaks after its first tokens ends with response.failed and error.
broken = list(client.responses.create(model="broken", input="hi", max_output_tokens=30, stream=True))
assert [e.type for e in broken[-2:]] == ["response.failed", "error"], [e.type for e in broken]
assert broken[-2].response.status == "failed" and broken[-2].response.error.message, broken[-2]
partial = "".join(e.delta for e in broken if e.type == "response.output_text.delta")
assert partial.strip() and len(partial.split()) <= 3, partial

# The simulator answers the same calls in the same wire format.
whole = sim.responses.create(model="meta-llama/Llama-3.1-8B-Instruct", input="hi", max_output_tokens=5)
assert whole.status == "incomplete" and whole.usage.output_tokens == 5 and whole.output_text.strip(), whole
check_text_stream(list(sim.responses.create(model="meta-llama/Llama-3.1-8B-Instruct", input="hi", stream=True)),
                  "response.completed")
with sim.responses.stream(model="meta-llama/Llama-3.1-8B-Instruct", input="hi") as stream:
    for _ in stream:
        pass
    assert stream.get_final_response().output_text.strip()

print("openai SDK", openai.__version__, "responses ok")
