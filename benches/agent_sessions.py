#!/usr/bin/env python3
"""Agent sessions against an OpenAI-compatible router: the workload of issue 47.

Each session has its own preamble (~450 tokens: instructions and a dozen tool descriptions, as
a coding agent sends) and resends it with its growing history every turn. With
`--shared-preamble` every session sends the same instructions and tool list (as every Claude
Code user does) and its own context in its first user message; `--think-ms` waits between an
answer and the next turn. `--concurrency`
sessions run at once; a session's next turn goes as soon as its last answer has ended. Plain
OpenAI requests, no session header: the router keys sessions on what it sees.

Per turn it records the time to the first content token (from sending), the prompt tokens and
those the engine reported cached (`usage.prompt_tokens_details.cached_tokens`, asked for with
`stream_options.include_usage`), and Spillway's headers where there are any (the serving
backend, the spill reason, the queue's word). It prints one JSON object: the turns and a
summary. Standard library only (asyncio streams), so it runs from any python3.
"""

import argparse
import asyncio
import json
import statistics
import time
import urllib.parse


def shared_preamble() -> str:
    """The instructions and tool list every session sends the same (--shared-preamble)."""
    tools = " ".join(
        f"Tool {t}: reads file number {t} of the project and returns its lines with their numbers."
        for t in range(12)
    )
    return f"You are a coding agent. Answer in one short sentence. Follow the project's house style. {tools}"


def own_context(session: int) -> str:
    """A session's own context in its first user message (--shared-preamble)."""
    return (
        f"Project {session} is a service named svc-{session}; its tests live in tests/{session}/ and its "
        f"entry point is src/main_{session}.rs. Its owners are team {session} and they review every change."
    )


def preamble(session: int) -> str:
    tools = " ".join(
        f"Tool {t} of session {session}: reads file number {t} and returns its lines with their numbers."
        for t in range(12)
    )
    return (
        f"You are coding agent {session}. Answer in one short sentence. "
        f"Follow the house style of project {session}. {tools}"
    )


async def post_stream(url: str, body: dict, timeout: float):
    """POST `body` as JSON over HTTP/1.1; yield (headers, status) once, then each SSE data line."""
    u = urllib.parse.urlsplit(url)
    reader, writer = await asyncio.open_connection(u.hostname, u.port or 80)
    payload = json.dumps(body).encode()
    head = (
        f"POST {u.path} HTTP/1.1\r\nHost: {u.netloc}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    )
    writer.write(head.encode() + payload)
    await writer.drain()
    try:
        status_line = await asyncio.wait_for(reader.readline(), timeout)
        status = int(status_line.split()[1])
        headers = {}
        while True:
            line = (await asyncio.wait_for(reader.readline(), timeout)).decode().rstrip("\r\n")
            if not line:
                break
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        yield ("head", status, headers)
        chunked = headers.get("transfer-encoding", "").lower() == "chunked"
        buf = b""
        while True:
            if chunked:
                size_line = await asyncio.wait_for(reader.readline(), timeout)
                size = int(size_line.strip() or b"0", 16)
                if size == 0:
                    break
                data = await asyncio.wait_for(reader.readexactly(size + 2), timeout)
                buf += data[:-2]
            else:
                data = await asyncio.wait_for(reader.read(65536), timeout)
                if not data:
                    break
                buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                line = line.rstrip(b"\r").decode()
                if line.startswith("data:"):
                    yield ("data", line[5:].strip(), None)
    finally:
        writer.close()


async def turn(args, messages):
    body = {
        "model": args.model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": args.max_tokens,
        "temperature": 0,
        "messages": messages,
    }
    sent = time.monotonic()
    ttft = None
    said = []
    usage = {}
    status, headers, error = None, {}, None
    async for kind, a, b in post_stream(args.url + "/v1/chat/completions", body, args.timeout):
        if kind == "head":
            status, headers = a, b
            continue
        if a == "[DONE]":
            break
        try:
            chunk = json.loads(a)
        except json.JSONDecodeError:
            continue
        if "error" in chunk:
            error = chunk["error"]
        for choice in chunk.get("choices") or []:
            text = (choice.get("delta") or {}).get("content")
            if text:
                if ttft is None:
                    ttft = time.monotonic() - sent
                said.append(text)
        if chunk.get("usage"):
            usage = chunk["usage"]
    return {
        "status": status,
        "error": error,
        "ttft_ms": None if ttft is None else round(ttft * 1000, 1),
        "prompt_tokens": usage.get("prompt_tokens", 0),
        "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0) or 0,
        "output_tokens": usage.get("completion_tokens", 0),
        "backend": headers.get("x-spillway-backend"),
        "spill": headers.get("x-spillway-spill"),
        "queue": headers.get("x-spillway-queue"),
        "queue_ms": headers.get("x-spillway-queue-ms"),
        "predicted_ttft_ms": headers.get("x-spillway-predicted-ttft-ms"),
    }, "".join(said)


async def session(args, s, gate, out):
    shared = args.shared_preamble
    messages = [{"role": "system", "content": shared_preamble() if shared else preamble(s)}]
    async with gate:
        for t in range(args.turns):
            if t > 0 and args.think_ms:
                await asyncio.sleep(args.think_ms / 1000)
            ask = f"Turn {t}: name one step to fix bug {s}.{t}."
            if shared and t == 0:
                ask = own_context(s) + " " + ask
            messages.append({"role": "user", "content": ask})
            met, said = await turn(args, messages)
            met.update(session=s, turn=t)
            out.append(met)
            messages.append({"role": "assistant", "content": said})


def pct(values, p):
    if not values:
        return None
    values = sorted(values)
    k = max(0, min(len(values) - 1, round(p / 100 * (len(values) - 1))))
    return values[k]


def summary(turns, local):
    ok = [t for t in turns if t["status"] == 200 and t["error"] is None and t["ttft_ms"] is not None]
    later = [t for t in ok if t["turn"] > 0]
    hosted = [t for t in ok if local is not None and t["backend"] not in (None, local)]
    ttfts = [t["ttft_ms"] for t in ok]
    prompt = sum(t["prompt_tokens"] for t in later)
    cached = sum(t["cached_tokens"] for t in later)
    all_prompt = sum(t["prompt_tokens"] for t in ok)
    return {
        "turns": len(turns),
        "answered": len(ok),
        "served_locally": len(ok) - len(hosted),
        "hosted_turns": len(hosted),
        "hosted_input_tokens": sum(t["prompt_tokens"] for t in hosted),
        "hosted_output_tokens": sum(t["output_tokens"] for t in hosted),
        "later_turns_cached_share": round(cached / prompt, 4) if prompt else None,
        "cached_share": round(sum(t["cached_tokens"] for t in ok) / all_prompt, 4) if all_prompt else None,
        "ttft_p50_ms": pct(ttfts, 50),
        "ttft_p95_ms": pct(ttfts, 95),
        "later_ttft_p50_ms": pct([t["ttft_ms"] for t in later], 50),
        "waited": sum(1 for t in ok if t["queue"] == "waited"),
        "spills": sorted({t["spill"] for t in ok if t["spill"]}),
    }


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True, help="the router's base URL, e.g. http://127.0.0.1:8080")
    ap.add_argument("--model", default="agent")
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--shared-preamble", action="store_true",
                    help="every session sends the same instructions and tool list, its own context in its first user message")
    ap.add_argument("--think-ms", type=float, default=0, help="from an answer's end to the session's next turn")
    ap.add_argument("--local", help="the backend header value that means the fleet served it")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    gate = asyncio.Semaphore(args.concurrency)
    turns = []
    started = time.monotonic()
    await asyncio.gather(*(session(args, s, gate, turns) for s in range(args.sessions)))
    turns.sort(key=lambda t: (t["session"], t["turn"]))
    result = {"label": args.label, "seconds": round(time.monotonic() - started, 1), "summary": summary(turns, args.local), "turns": turns}
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
