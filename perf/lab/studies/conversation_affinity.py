"""Conversation affinity at the gateway's OpenAI door: third-turn time to first token with affinity and
without, and how the calls split over two replicas of the real stack.

    .venv/bin/python -m perf study conversation_affinity [--conversations 8] [--concurrency 2] [--allow-busy]
    # writes perf/reports/conversation_affinity.md

Two replicas (tritonserver with text_generation's vLLM engine, prefix caching on, and the OpenAI API beside
each) behind two tenant gateways on the same replicas: one with conversation affinity (the default), one with
`--openai-affinity off` (least connections). Each conversation is three streamed chat turns: a system prompt
and a long first user message of its own (a document of ~DOCUMENT_WORDS words and a question), then two
follow-up questions, each turn resending the history with the answers. Conversations run `--concurrency` at a
time; the two gateways take turns by rounds (off, on, on, off, ...) so drift on a shared host falls on both.
Which replica served each call comes from the gateway's access log (each call's query string names it).
"""

from __future__ import annotations

import http.client
import json
import os
import random
import statistics
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from datetime import datetime, timezone

from hotpath import paths
from hotpath.gateway.config import TenantGatewaySettings
from hotpath.gateway.openai_door import AFFINITY_FACTOR, openai_config
from hotpath.gateway.tenant_gateway import TenantGateway
from hotpath.gateway.tenants import Tenant, new_token
from hotpath.openai_api.openai_server import OpenAIServer
from hotpath.scaleout.replicas import LocalReplicas
from hotpath.server.ports import free_ports
from hotpath.server.subset import linked
from hotpath.sweeps.measure.host_load import require_quiet
from perf.lab.studies import runner

REPORT = paths.ROOT / "perf" / "reports" / "conversation_affinity.md"
MODEL = "text_generation"
DOCUMENT_WORDS = 700          # ~1,000 tokens: several of the prefix cache's 128-token blocks
MAX_TOKENS = 12
SYSTEM = "You are a careful assistant. Answer in one short sentence."
QUESTIONS = ("What is the first topic of the document above?", "And the second one?", "Which one matters most?")
WORDS = ("replica", "gateway", "token", "cache", "prefix", "latency", "engine", "batch", "tenant", "budget",
         "stream", "prompt", "answer", "socket", "kernel", "thread", "memory", "vector", "index", "shard",
         "river", "mountain", "harbor", "lantern", "orchard", "meadow", "glacier", "canyon", "island", "forest")


def _document(seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(DOCUMENT_WORDS))


def _turn(address: str, token: str, messages: list[dict], tag: str) -> tuple[float, str]:
    """One streamed chat call to host:port: (seconds to the first content chunk, the answer's text)."""
    body = json.dumps({"model": MODEL, "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0,
                       "stream": True}).encode()
    text, first = [], None
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=300)
    t0 = time.perf_counter()
    try:
        conn.request("POST", f"/v1/chat/completions?{tag}", body,
                     {"authorization": f"Bearer {token}", "content-type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            raise RuntimeError(f"{tag}: HTTP {r.status}: {r.read()[:300]!r}")
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[6:]).get("choices") or [{}]
            delta = choices[0].get("delta") or {}
            if delta.get("content"):
                first = first or time.perf_counter() - t0
                text.append(delta["content"])
    finally:
        conn.close()
    return (first if first is not None else time.perf_counter() - t0), "".join(text)


def _conversation(url: str, token: str, mode: str, index: int) -> list[float]:
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"Document {mode}-{index}:\n{_document(2 * index + (mode == 'on'))}\n\n"
                                            f"{QUESTIONS[0]}"}]
    ttfts = []
    for turn in range(3):
        if turn:
            messages.append({"role": "user", "content": QUESTIONS[turn]})
        ttft, answer = _turn(url, token, messages, f"mode={mode}&conversation={index}&turn={turn + 1}")
        ttfts.append(ttft)
        messages.append({"role": "assistant", "content": answer or "."})
    return ttfts


def _served(gateway: TenantGateway, calls: int) -> dict[tuple[int, int], str]:
    """(conversation, turn) -> the replica that answered, from the access log's query strings."""
    out = {}
    for e in gateway.log(0, calls):
        if "conversation=" in e.uri:
            q = dict(p.split("=", 1) for p in e.uri.split("?", 1)[1].split("&"))
            out[(int(q["conversation"]), int(q["turn"]))] = e.served_by
    return out


def _metrics(gateway: TenantGateway) -> dict[str, int]:
    with urllib.request.urlopen(f"http://{gateway.status_url}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("hotpath_gateway_openai_affinity"):
            name, value = line.rsplit(" ", 1)
            out[name.replace("hotpath_gateway_openai_affinity_", "")] = int(float(value))
    return out


def _p50(values: list[float]) -> float:
    return statistics.median(values) * 1000 if values else float("nan")


def _cpu() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    flags = [f for f in fields.get("Flags", "").split() if f.startswith(("avx", "amx"))]
    return f"{fields.get('Model name', '?').strip()}, {os.cpu_count()} CPUs, flags {' '.join(flags) or 'none'}"


def main(argv: list[str] | None = None) -> int:
    parser = runner.parser("conversation_affinity", __doc__)
    parser.add_argument("--conversations", type=int, default=8, help="per mode (default 8)")
    parser.add_argument("--concurrency", type=int, default=2, help="conversations at a time (default 2)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per mode, alternating (default 2)")
    args = parser.parse_args(argv)
    quiet = require_quiet(args.allow_busy)
    load_before = os.getloadavg()
    repository = linked([MODEL])
    token = new_token()
    tenants = (Tenant("study", token, 10_000, 10_000, tokens_per_min=10_000_000),)
    results: dict[str, list[list[float]]] = {"on": [], "off": []}
    indexes = {"on": 0, "off": 0}
    started = time.perf_counter()
    with ExitStack() as stack:
        replicas = stack.enter_context(LocalReplicas(2, repository))
        apis = [stack.enter_context(OpenAIServer(url, free_ports(1)[0], repository)) for url in replicas.grpc_urls]
        loaded_s = time.perf_counter() - started
        upstreams = tuple(f"{a.host}:{a.port}" for a in apis)
        gateways = {}
        for mode in ("on", "off"):
            grpc_port, http_port, openai_port = free_ports(3)
            gateways[mode] = stack.enter_context(TenantGateway(TenantGatewaySettings(
                grpc_port, http_port, (replicas.grpc_urls[0],), (replicas.http_urls[0],), tenants, max_in_flight=64,
                openai_port=openai_port, openai_upstreams=upstreams, openai=openai_config(repository),
                openai_affinity=mode == "on")))
        # one call per replica first: the engines' first-call costs fall on neither mode
        for i, api in enumerate(apis):
            _turn(f"{api.host}:{api.port}", token, [{"role": "user", "content": "Hello"}], f"warmup={i}")
        per_round = max(1, args.conversations // args.rounds)
        order = [m for r in range(args.rounds) for m in (("off", "on") if r % 2 == 0 else ("on", "off"))]
        for mode in order:
            url = f"127.0.0.1:{gateways[mode].settings.openai_port}"
            batch = list(range(indexes[mode], indexes[mode] + per_round))
            indexes[mode] += per_round
            with ThreadPoolExecutor(args.concurrency) as pool:
                results[mode] += list(pool.map(lambda i, m=mode, u=url: _conversation(u, token, m, i), batch))
            print(f"[conversation_affinity] {mode}: {len(results[mode])} conversations", flush=True)
        served = {m: _served(gateways[m], 3 * indexes[m]) for m in gateways}
        counters = _metrics(gateways["on"])
    load_after = os.getloadavg()
    names = {u: f"replica {i + 1}" for i, u in enumerate(upstreams)}
    rows = []
    for mode in ("on", "off"):
        ttfts = results[mode]
        by = served[mode]
        home = sum(1 for c in range(indexes[mode]) if by.get((c, 3)) and by.get((c, 3)) == by.get((c, 1)))
        # warm: turn 3 on a replica that served one of the conversation's earlier turns (it computed the history)
        warm = [c for c in range(indexes[mode]) if by.get((c, 3)) in (by.get((c, 1)), by.get((c, 2)))]
        cold = [c for c in range(indexes[mode]) if c not in warm]
        split = {names.get(a, a): sum(1 for v in by.values() if v == a) for a in upstreams}
        rows.append(f"| {'affinity (default)' if mode == 'on' else 'off (least connections)'} | {len(ttfts)} | "
                    f"{_p50([t[0] for t in ttfts]):.0f} | {_p50([t[1] for t in ttfts]):.0f} | "
                    f"{_p50([t[2] for t in ttfts]):.0f} | {home} / {indexes[mode]} | "
                    f"{len(warm)}: {_p50([ttfts[c][2] for c in warm]):.0f} / {len(cold)}: "
                    f"{_p50([ttfts[c][2] for c in cold]):.0f} | {', '.join(f'{k}: {v}' for k, v in split.items())} |")
    command = "python -m perf study conversation_affinity" + \
        f" --conversations {args.conversations} --concurrency {args.concurrency} --rounds {args.rounds}" + \
        (" --allow-busy" if args.allow_busy else "")
    REPORT.write_text("\n".join([
        "# Conversation affinity at the OpenAI door",
        "",
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; `.venv/bin/{command}`. CPU: {_cpu()}. "
        f"Machine: {quiet.summary()}; load average (1/5/15 min) {' / '.join(f'{x:.2f}' for x in load_before)} "
        f"before, {' / '.join(f'{x:.2f}' for x in load_after)} after. Two replicas on this one machine (tritonserver "
        f"with `{MODEL}`'s vLLM engine, prefix caching on, 128-token blocks, and the OpenAI API beside each; "
        f"ready in {loaded_s:.0f} s), behind two tenant gateways on the same replicas: affinity on (load factor "
        f"{AFFINITY_FACTOR}) and `--openai-affinity off`. Each conversation: a system prompt and a first user "
        f"message of its own (a ~{DOCUMENT_WORDS}-word document and a question), then two follow-ups, each turn "
        f"resending the history; greedy, {MAX_TOKENS} tokens per answer, streamed; {args.concurrency} "
        f"conversations at a time, the modes alternating by rounds ({', '.join(order)}).",
        "",
        "| gateway | conversations | turn 1 TTFT p50 (ms) | turn 2 TTFT p50 (ms) | turn 3 TTFT p50 (ms) | "
        "turn 3 on turn 1's replica | turn 3 on a replica of an earlier turn: count: TTFT p50 (ms) / elsewhere | "
        "calls per replica |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Affinity gateway's counters: {', '.join(f'{k} {v}' for k, v in sorted(counters.items())) or 'none'} "
        "(`hotpath_gateway_openai_affinity_*`: preferred = the conversation's own replica, spilled = the next on "
        "the ring, no_key = least loaded).",
        "",
        "Turn 1 prefills the whole document on either gateway (nothing is cached for it yet). A later turn's "
        "prefill reuses the KV blocks of the history it resends only on a replica that computed them: with "
        "affinity that is always the conversation's replica (unless the load bound spills it); with least "
        "connections each turn lands wherever fewer calls are open, so some later turns prefill the whole "
        "history again on the other replica. Both replicas share this machine's cores, so the figures are for "
        "comparing the two rows of one run, not absolute speeds (docs/runtime_notes.md).",
        "",
        "With two replicas, least connections alternates between them while the load is even, so its third turns "
        "often land on a replica that computed an earlier turn (the columns above say how often) and the prefix "
        "cache serves them anyway; the gap grows with the number of replicas (with N replicas and independent "
        "picks, turn 3 finds an earlier turn's replica at most about 2/N of the time). A call the load bound "
        "spills to the next replica pays the whole prefill there (the \"elsewhere\" figure); "
        "`hotpath_gateway_openai_affinity_total{result=\"spilled\"}` counts them.",
    ]) + "\n")
    print(f"[conversation_affinity] wrote {REPORT.relative_to(paths.ROOT)}")
    return 0
