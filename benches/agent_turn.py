#!/usr/bin/env python3
"""A coding agent's turn as an OpenAI chat-completions request, for the edge bench (issue 50).

    benches/agent_turn.py --model M [--stream] [--bytes 102400] > body.json

Deterministic: the same arguments give the same bytes. The body has what an agent resends on
every turn: a long system prompt, 12 tool schemas, and a history of user turns, assistant tool
calls (arguments as JSON strings) and tool results (file listings and source text), ending with
a user turn; the history grows until the body reaches --bytes.
"""
import argparse
import json
import random

WORDS = (
    "the a repository file function test module error type value request answer stream "
    "config node fleet cache prefix token latency budget router backend upstream session "
    "turn tool schema argument result build check lint format commit branch diff patch "
    "read write edit search replace line column path directory import export struct enum "
    "trait impl async await future task spawn channel lock atomic counter metric ledger"
).split()

TOOLS = [
    ("read_file", "Read a file from the workspace.", {"path": "string", "offset": "integer", "limit": "integer"}),
    ("write_file", "Write a whole file.", {"path": "string", "content": "string"}),
    ("edit_file", "Replace one exact string in a file.", {"path": "string", "old": "string", "new": "string"}),
    ("list_dir", "List a directory.", {"path": "string", "depth": "integer"}),
    ("grep", "Search files for a pattern.", {"pattern": "string", "path": "string", "glob": "string"}),
    ("glob", "Find files by name.", {"pattern": "string", "path": "string"}),
    ("bash", "Run a shell command.", {"command": "string", "timeout_ms": "integer"}),
    ("run_tests", "Run the test suite or one test.", {"filter": "string", "package": "string"}),
    ("git_diff", "Show the working tree's diff.", {"path": "string", "staged": "boolean"}),
    ("git_commit", "Commit the staged changes.", {"message": "string"}),
    ("web_fetch", "Fetch a URL and return its text.", {"url": "string", "prompt": "string"}),
    ("todo_write", "Replace the task list.", {"items": "array"}),
]


def sentence(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def paragraph(rng, sentences):
    return " ".join(sentence(rng, rng.randint(8, 20)) for _ in range(sentences))


def tool(name, description, params, rng):
    properties = {
        p: {"type": t, "description": sentence(rng, 12)} | ({"items": {"type": "string"}} if t == "array" else {})
        for p, t in params.items()
    }
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description + " " + paragraph(rng, 6),
            "parameters": {"type": "object", "properties": properties, "required": list(params)[:1],
                           "additionalProperties": False},
        },
    }


def source(rng, lines):
    out = []
    for i in range(lines):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 8)))
        out.append(f"{i + 1:>5}\t    let {rng.choice(WORDS)}_{i} = {words.replace(' ', '_')}(&{rng.choice(WORDS)});")
    return "\n".join(out)


def build(model, stream, size):
    rng = random.Random(50)
    system = "You are a coding agent working in the user's repository.\n\n" + "\n\n".join(
        paragraph(rng, 10) for _ in range(20))
    body = {
        "model": model,
        "stream": stream,
        "max_tokens": 4096,
        "messages": [{"role": "system", "content": system},
                     {"role": "user", "content": paragraph(rng, 3)}],
        "tools": [tool(n, d, p, rng) for n, d, p in TOOLS],
        "tool_choice": "auto",
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    messages, call = body["messages"], 0
    last = {"role": "user", "content": "Now run the tests again and fix what fails."}
    while len(json.dumps(body)) + len(json.dumps(last)) < size:
        name, _, params = TOOLS[call % len(TOOLS)]
        arguments = {p: (f"src/{rng.choice(WORDS)}/{rng.choice(WORDS)}.rs" if p == "path" else sentence(rng, 6))
                     for p in params}
        call_id = f"call_{call:04d}"
        messages.append({"role": "assistant", "content": sentence(rng, 15),
                         "tool_calls": [{"id": call_id, "type": "function",
                                         "function": {"name": name, "arguments": json.dumps(arguments)}}]})
        messages.append({"role": "tool", "tool_call_id": call_id, "content": source(rng, rng.randint(20, 60))})
        call += 1
    messages.append(last)
    return body


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--bytes", type=int, default=100 * 1024)
    args = parser.parse_args()
    print(json.dumps(build(args.model, args.stream, args.bytes), separators=(",", ":")), end="")


if __name__ == "__main__":
    main()
