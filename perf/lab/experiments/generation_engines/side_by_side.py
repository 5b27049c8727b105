"""The former ONNX Runtime engine vs vLLM for text_generation, one run on one host.

    flock /tmp/hotpath-bench.lock .venv/bin/python perf/lab/experiments/generation_engines/side_by_side.py \
        --old /tmp/tg-old/repo [--rounds 2]

`--old`: a model repository holding the former text_generation (its model.py, export/model.onnx and config,
as `hotpath engines` built them before commit f9746f0; the engine's code itself was removed in 5eb8282,
so `git worktree add /tmp/tg-old 5eb8282^` for its runtime); the vLLM one is model_repository/'s. Each system is
started alone (tritonserver, this model only), measured, stopped: load to ready, RSS of the stub and its
children (vLLM's engine process, EngineCore, worker), then streaming greedy chats of 48 tokens at c=1 and
c=8 (hotpath.sweeps.measure.streaming.PROMPTS): TTFT p50/p95, inter-token p50/mean, tokens/s.
"""

from __future__ import annotations

import argparse
import json
import math
import queue
import statistics
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import tritonclient.grpc as grpcclient

from hotpath import paths
from hotpath.server.local_triton import LocalTriton
from hotpath.server.ports import ServerPorts, free_ports
from hotpath.server.stubs import stub_pids
from hotpath.server.subset import linked
from hotpath.sweeps.measure.streaming import PROMPTS

MODEL = "text_generation"
MAX_TOKENS = 48


def _bytes(name, value):
    t = grpcclient.InferInput(name, [1], "BYTES")
    t.set_data_from_numpy(np.array([value.encode()], dtype=np.object_))
    return t


def old_inputs(prompt):
    t = grpcclient.InferInput("MAX_TOKENS", [1], "INT64")
    t.set_data_from_numpy(np.array([MAX_TOKENS], np.int64))
    return [_bytes("PROMPT", prompt), t], "FINISH_REASON", "COMPLETION_TOKENS"


def new_inputs(prompt):
    inputs = [_bytes("messages", json.dumps([{"role": "user", "content": prompt}])),
              _bytes("sampling_parameters", json.dumps({"max_tokens": MAX_TOKENS}))]
    for name in ("stream", "exclude_input_in_output", "return_finish_reason", "return_num_output_tokens"):
        t = grpcclient.InferInput(name, [1], "BOOL")
        t.set_data_from_numpy(np.array([True]))
        inputs.append(t)
    return inputs, "finish_reason", "num_output_tokens"


def one_stream(url, make, prompt):
    """(response times since the send, tokens generated)."""
    responses = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result=None, error=None: responses.put((time.perf_counter(), result, error)))
    inputs, final_name, count_name = make(prompt)
    sent = time.perf_counter()
    client.async_stream_infer(MODEL, inputs)
    times = []
    try:
        while True:
            at, result, error = responses.get(timeout=600)
            if error is not None:
                raise RuntimeError(error.message())
            if result.as_numpy(final_name) is not None:
                return times, int(result.as_numpy(count_name).reshape(-1)[0])
            times.append(at - sent)
    finally:
        client.stop_stream()
        client.close()


def load(url, make, concurrency, rounds):
    records, lock = [], threading.Lock()

    def worker(i):
        for r in range(rounds):
            got = one_stream(url, make, PROMPTS[(i + r * concurrency) % len(PROMPTS)])
            with lock:
                records.append(got)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    ttft = sorted(t[0] for t, _ in records if t)
    gaps = [b - a for t, _ in records for a, b in zip(t, t[1:])]
    tokens = sum(n for _, n in records)
    return {"ttft_p50_ms": 1000 * statistics.median(ttft), "ttft_p95_ms": 1000 * ttft[min(len(ttft) - 1, math.ceil(0.95 * len(ttft)) - 1)],
            "itl_p50_ms": 1000 * statistics.median(gaps), "itl_mean_ms": 1000 * statistics.fmean(gaps),
            "tokens_per_s": tokens / wall, "streams": len(records)}


def rss_mb(server):
    total = 0
    for pid in stub_pids(server.process.pid, MODEL):
        proc = psutil.Process(pid)
        for p in [proc, *proc.children(recursive=True)]:
            if "hotpath-stub-watcher" not in " ".join(p.cmdline()):
                total += p.memory_info().rss
    return total / 2**20


def measure(label, repository, make, rounds):
    server = LocalTriton(repository, ports=ServerPorts(*free_ports(3)), log=lambda m: None)
    started = time.perf_counter()
    server.start(timeout=900)
    ready = time.perf_counter() - started
    try:
        load(server.grpc_url, make, 2, 1)   # warm up
        row = {"system": label, "load_to_ready_s": ready, "rss_mb": rss_mb(server)}
        for c in (1, 8):
            row[f"c{c}"] = load(server.grpc_url, make, c, rounds)
        return row
    finally:
        server.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    flags = next((line for line in open("/proc/cpuinfo") if line.startswith("flags")), "")
    print(f"host: {cpu}, {psutil.cpu_count()} CPUs, avx512f {'avx512f' in flags}, load {psutil.getloadavg()}")
    rows = [measure("ORT engine (former, fp32)", args.old, old_inputs, args.rounds),
            measure("vLLM (dtype auto)", linked([MODEL], repository=paths.model_repository()), new_inputs, args.rounds)]
    print("| system | load to ready s | RSS MB | c=1 ITL p50 ms | c=1 ITL mean ms | c=1 TTFT p50 ms | "
          "c=8 tok/s | c=8 TTFT p95 ms | c=8 ITL p50 ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['system']} | {r['load_to_ready_s']:.1f} | {r['rss_mb']:.0f} | {r['c1']['itl_p50_ms']:.1f} | "
              f"{r['c1']['itl_mean_ms']:.1f} | {r['c1']['ttft_p50_ms']:.0f} | {r['c8']['tokens_per_s']:.1f} | "
              f"{r['c8']['ttft_p95_ms']:.0f} | {r['c8']['itl_p50_ms']:.1f} |")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
