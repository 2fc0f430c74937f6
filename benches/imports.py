#!/usr/bin/env python3
"""The crate's import graph, read from its own source: cycles and imports against the flow.

Each file under src/ is a module (test-only files and folders, and items under `#[cfg(test)]`, left out); an edge A -> B is a `crate::`, `super::` or `self::` path in
A that names B (or something inside B). Edges between a module and its own ancestor are left
out: a child reading its parent's vocabulary, or a parent wiring its children, is how Rust
modules are built, not a cycle.

Cycles are strongly connected components of more than one module. An import "against the
flow" is an edge from a lower layer to a higher one (LAYERS below, bottom first); an edge
whose line (or the line above it) carries `// upward:` is counted as explained.

    python3 benches/imports.py            # summary and the offending edges
    python3 benches/imports.py --check    # exit 1 on a cycle, an unexplained upward import, or a
                                          # door reaching behind the pipeline
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

# Bottom first, one module family per layer: a module may import its own family and the
# families below it, never one beside or above, so the order itself is what --check proves.
LAYERS = [
    # the shared vocabulary: allocation, requests, events and errors, token counts
    ["allocator"], ["canonical"], ["tokens"],
    # the config and what it names
    ["config"],
    # who is at the other end of a backend: the providers and their wires
    ["adapter"],
    # the state the request path reads and feeds, and the records it emits
    ["fleet"], ["trace"], ["outcome"], ["ledger"], ["guard"], ["keys"], ["snapshot"],
    # the request path: pure planning, dispatch, and its metrics
    ["policy"], ["route"], ["dispatch"], ["metrics"],
    # beside it: batch jobs, the control loops, the gate and the report over the ledger
    ["batch"], ["control"], ["gate"], ["report"],
    # the request pipeline: task and key, facts, plan, budget, dispatch, settlement, shadow
    ["serve"],
    # the front door (the dialects, the edge, admin), then the composition root
    ["api"], ["app"],
    # offline commands and side binaries
    ["agent"], ["capacity"], ["sim"], ["demo"], ["simulate"], ["cli"],
]
LAYER_OF = {name: i for i, names in enumerate(LAYERS) for name in names}

# The dialect doors and the code they share speak to the pipeline and to nothing behind it:
# each may import only these families (its own, api, included). The admin, dashboard and
# metrics routes may read the rest of the state.
DOORS = {"chat", "completions", "embeddings", "messages", "responses", "batches", "wire",
         "front", "chunks", "body", "input", "whole"}
DOORS_MAY = {"api", "canonical", "config", "serve", "keys", "batch", "trace"}


def module_files():
    """(module path as a tuple, file path) for every module of the crate."""
    out = {}
    src = os.path.join(ROOT, "src")
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs") or f in ("main.rs", "lib.rs", "tests.rs") or f.endswith("_tests.rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src)[:-3].split(os.sep)
            if "tests" in rel:
                continue
            if rel[-1] == "mod":
                rel = rel[:-1]
            out[tuple(rel)] = os.path.join(dirpath, f)
    sim = os.path.join(ROOT, "vllm", "sim")
    for dirpath, _, files in os.walk(sim):
        for f in files:
            if f.endswith(".rs"):
                rel = os.path.relpath(os.path.join(dirpath, f), sim)[:-3].split(os.sep)
                if rel[-1] == "mod":
                    rel = rel[:-1]
                out[("sim",) + tuple(x for x in rel if x != "")] = os.path.join(dirpath, f)
    return out


def strip_comments(text):
    """The file's lines without comments (an `// upward:` or `// door:` note kept) and without test code:
    each item under `#[cfg(test)]` (a `mod tests;` line, or an item up to its closing brace)."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    lines = [re.sub(r"//(?!\s*(?:upward|door):).*", "", line) for line in text.splitlines()]
    text = "\n".join(lines)
    out, at = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]", text):
        if m.start() < at:
            continue
        out.append(text[at : m.start()])
        at = item_end(text, m.end())
        # Keep the line count, so `// upward:` notes stay beside their line.
        out.append("\n" * text.count("\n", m.start(), at))
    out.append(text[at:])
    return "".join(out).split("\n")


def item_end(text, i):
    """Where the item starting at `i` ends: after its `;` or its closing brace, whichever
    comes first at depth 0; string and char literals are skipped."""
    depth = 0
    while i < len(text):
        ch = text[i]
        if ch == '"' or (ch == "r" and re.match(r'r#*"', text[i:])):
            i = string_end(text, i)
            continue
        if ch == "'" and re.match(r"'(\\.|[^\\'])'", text[i:]):
            i += len(re.match(r"'(\\.|[^\\'])'", text[i:]).group(0))
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        elif ch == ";" and depth == 0:
            return i + 1
        i += 1
    return i


def string_end(text, i):
    """Past the string literal starting at `i` (plain or raw)."""
    raw = re.match(r'r(#*)"', text[i:])
    if raw:
        close = '"' + raw.group(1)
        j = text.find(close, i + len(raw.group(0)))
        return len(text) if j < 0 else j + len(close)
    j = i + 1
    while j < len(text):
        if text[j] == "\\":
            j += 2
            continue
        if text[j] == '"':
            return j + 1
        j += 1
    return j


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> ["a::b", "a::c::d", "a::c::e"]."""
    tree = tree.replace(" ", "").replace("\n", "")
    m = re.match(r"^(.*?)\{(.*)\}$", tree)
    if not m:
        return [tree]
    prefix, inner = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    return [p for part in parts if part for p in expand_use(prefix + part)]


def resolve(me, path, modules, is_dir_module):
    """The module that a path written in module `me` names, or None outside the crate."""
    segs = [s for s in path.split("::") if s]
    if not segs:
        return None
    if segs[0] == "crate":
        base, segs = (), segs[1:]
    elif segs[0] in ("super", "self"):
        base = me
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
    else:
        return None
    best = None
    for i in range(len(segs) + 1):
        cand = base + tuple(segs[:i])
        if cand in modules:
            best = cand
    return best


def edges(modules):
    found = {}
    for me, path in modules.items():
        is_dir = path.endswith("mod.rs")
        lines = strip_comments(open(path, encoding="utf-8").read())
        text = "\n".join(lines)
        for m in re.finditer(r"\buse\s+((?:crate|super|self)::[^;]+);", text):
            line_no = text.count("\n", 0, m.start())
            explained = any(w in lines[j] for w in ("upward:", "door:") for j in (line_no - 1, line_no) if j >= 0)
            for p in expand_use(m.group(1)):
                p = re.sub(r"\bas\s*\w+$", "", p.replace("as", " as ")).strip()
                target = resolve(me, p, modules, is_dir)
                if target and target != me:
                    found.setdefault((me, target), explained)
        for m in re.finditer(r"(?<![\w:])((?:crate|super)(?:::\w+)+)", text):
            line_no = text.count("\n", 0, m.start())
            explained = any(w in lines[j] for w in ("upward:", "door:") for j in (line_no - 1, line_no) if j >= 0)
            target = resolve(me, m.group(1), modules, is_dir)
            if target and target != me:
                found.setdefault((me, target), explained)
    kept = {}
    for (a, b), explained in found.items():
        if a[: len(b)] == b or b[: len(a)] == a:
            continue
        kept[(a, b)] = explained
    return kept


def cycles(nodes, graph):
    """Tarjan's strongly connected components of more than one node."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def name(m):
    return "::".join(m)


def main():
    modules = module_files()
    found = edges(modules)
    graph = {}
    for a, b in found:
        graph.setdefault(a, set()).add(b)
    comps = cycles(modules, graph)
    upward, behind, explained = [], [], []
    for (a, b), why in sorted(found.items()):
        la, lb = LAYER_OF.get(a[0]), LAYER_OF.get(b[0])
        if la is None or lb is None:
            print(f"unlayered module: {name(a if la is None else b)}", file=sys.stderr)
            continue
        if lb > la:
            (explained if why else upward).append((a, b))
        elif a[0] == "api" and len(a) > 1 and a[1] in DOORS and b[0] not in DOORS_MAY:
            (explained if why else behind).append((a, b))
    print(f"modules: {len(modules)}  edges: {len(found)}")
    print(f"import cycles: {len(comps)}")
    for comp in comps:
        print("  cycle: " + " <-> ".join(name(m) for m in comp))
    print(f"imports against the flow: {len(upward)} unexplained, {len(explained)} explained")
    for a, b in upward:
        print(f"  upward: {name(a)} -> {name(b)}")
    print(f"doors reaching behind the pipeline: {len(behind)} unexplained")
    for a, b in behind:
        print(f"  behind: {name(a)} -> {name(b)}")
    for a, b in explained:
        print(f"  explained: {name(a)} -> {name(b)}")
    if "--check" in sys.argv and (comps or upward or behind):
        sys.exit(1)


if __name__ == "__main__":
    main()
