"""Where /v1/embeddings' extra cost over gRPC goes at concurrency 1: each hop timed alone, interleaved.

    python perf/lab/experiments/openai_hop/hop_costs.py [--rounds 3 --requests 300]

Against one tritonserver serving text_embedding (response cache off) and hotpath's OpenAI API in front of it,
each round times, one request at a time, with texts never sent before:
- grpc: tritonclient.grpc (sync), what perf/reports/openai_api.md's "gRPC to text_embedding" measures;
- grpc.aio: the same call from an asyncio loop through tritonclient.grpc.aio with a 60 s deadline, as the API
  made it before;
- bare grpc.aio: the GRPCInferenceService call on a grpc.aio channel with the loop's time bound, as the API
  makes it now (hotpath.openai_api.triton);
- grpc in a thread: the sync call handed from an asyncio loop to a worker thread (run_in_executor);
- http, no Triton: POST to a route the API does not have (uvicorn + Starlette + the 404 answer): the HTTP hop;
- /v1/embeddings: the whole door, and the API process's CPU time per request (user + system, psutil).
Prints the medians of the rounds' p50s and the differences; nothing is written.
"""

import argparse
import asyncio
import functools
import http.client
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

import psutil  # noqa: E402
import tritonclient.grpc.aio as grpcaio  # noqa: E402
import uvloop  # noqa: E402

from hotpath.client import EmbeddingClient, text_input  # noqa: E402
from hotpath.openai_api.catalog import ServedModel  # noqa: E402
from hotpath.openai_api.openai_server import OpenAIServer  # noqa: E402
from hotpath.openai_api.triton import EMBEDDING_OUTPUT, Triton  # noqa: E402
from hotpath.server.local_triton import LocalTriton  # noqa: E402
from hotpath.server.ports import ServerPorts, free_ports  # noqa: E402
from hotpath.server.subset import linked  # noqa: E402
from hotpath.specs.repository import Repository  # noqa: E402
from perf.lab.compare.openai_api import MODEL, _texts, c1_grpc, c1_http  # noqa: E402


async def _p50_ms(infer, texts, n: int, build=lambda text: [text_input("TEXT", [text])],
                  read=lambda result: result.as_numpy("EMBEDDING")) -> float:
    """p50 ms of `n` awaited `infer(build(text))` calls, one at a time, each with a new text."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        read(await infer(build(next(texts))))
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def c1_aio(url: str, texts, n: int) -> float:
    """The call as the API made it: tritonclient.grpc.aio with a deadline, from an asyncio loop."""
    async def run() -> float:
        client = grpcaio.InferenceServerClient(url)
        try:
            return await _p50_ms(lambda inputs: client.infer(MODEL, inputs, outputs=EMBEDDING_OUTPUT,
                                                             client_timeout=60.0), texts, n)
        finally:
            await client.close()
    return uvloop.run(run())   # the API's loop


def c1_bare(url: str, texts, n: int) -> float:
    """The call as the API makes it: Triton.embed (the bare stub on a grpc.aio channel, bounded by the loop)."""
    model = ServedModel(MODEL, MODEL, "embedding", None, max_batch_size=32)

    async def run() -> float:
        triton = Triton(url)
        try:
            return await _p50_ms(lambda batch: triton.embed(model, batch), texts, n, build=lambda text: [text],
                                 read=lambda vectors: vectors)
        finally:
            await triton.close()
    return uvloop.run(run())   # the API's loop


def c1_thread(url: str, texts, n: int) -> float:
    """The sync client's call handed to a worker thread from an asyncio loop (run_in_executor)."""
    import tritonclient.grpc as grpcclient

    async def run() -> float:
        client, loop = grpcclient.InferenceServerClient(url), asyncio.get_running_loop()
        try:
            return await _p50_ms(lambda inputs: loop.run_in_executor(
                None, functools.partial(client.infer, MODEL, inputs, outputs=EMBEDDING_OUTPUT)), texts, n)
        finally:
            client.close()
    return uvloop.run(run())   # the API's loop


def c1_http_404(base_url: str, n: int) -> float:
    url = urlparse(base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    times = []
    body = b'{"model": "text_embedding", "input": "x"}'
    for _ in range(n):
        t0 = time.perf_counter()
        conn.request("POST", "/v1/no-such-route", body, {"content-type": "application/json"})
        response = conn.getresponse()
        response.read()
        times.append(time.perf_counter() - t0)
        assert response.status == 404, response.status
    conn.close()
    return statistics.median(times) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    repository = linked(Repository().endpoint(MODEL).models)
    hops = ("grpc", "grpc.aio", "bare grpc.aio", "grpc in a thread", "http, no Triton", "/v1/embeddings")
    got: dict[str, list[float]] = {hop: [] for hop in hops}
    with LocalTriton(repository, ServerPorts(*free_ports(3)), cache_bytes=0, log=lambda m: None) as triton, \
            OpenAIServer(triton.grpc_url, free_ports(1)[0], repository) as api, \
            EmbeddingClient(triton.grpc_url) as client:
        texts = {k: _texts(k) for k in got}
        c1_http(api.base_url, texts["/v1/embeddings"], 50)
        api_process, cpu_ms = psutil.Process(api.process.pid), []
        c1_grpc(client, texts["grpc"], 50)
        c1_aio(triton.grpc_url, texts["grpc.aio"], 50)
        c1_bare(triton.grpc_url, texts["bare grpc.aio"], 50)
        c1_thread(triton.grpc_url, texts["grpc in a thread"], 50)
        c1_http_404(api.base_url, 50)
        for r in range(args.rounds):
            got["grpc"].append(c1_grpc(client, texts["grpc"], args.requests))
            got["grpc.aio"].append(c1_aio(triton.grpc_url, texts["grpc.aio"], args.requests))
            got["bare grpc.aio"].append(c1_bare(triton.grpc_url, texts["bare grpc.aio"], args.requests))
            got["grpc in a thread"].append(c1_thread(triton.grpc_url, texts["grpc in a thread"], args.requests))
            got["http, no Triton"].append(c1_http_404(api.base_url, args.requests))
            before = sum(api_process.cpu_times()[:2])
            got["/v1/embeddings"].append(c1_http(api.base_url, texts["/v1/embeddings"], args.requests))
            cpu_ms.append((sum(api_process.cpu_times()[:2]) - before) * 1e3 / args.requests)
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} ms" for k, v in got.items()), flush=True)
    med = {k: statistics.median(v) for k, v in got.items()}
    print("| hop | p50 ms per round | median |\n|---|---|---|")
    for k, v in got.items():
        print(f"| {k} | {', '.join(f'{x:.2f}' for x in v)} | {med[k]:.2f} |")
    print(f"door - grpc: {med['/v1/embeddings'] - med['grpc']:+.2f} ms; grpc.aio - grpc: "
          f"{med['grpc.aio'] - med['grpc']:+.2f} ms; bare grpc.aio - grpc: "
          f"{med['bare grpc.aio'] - med['grpc']:+.2f} ms; grpc in a thread - grpc: "
          f"{med['grpc in a thread'] - med['grpc']:+.2f} ms; the HTTP hop alone: {med['http, no Triton']:.2f} ms; "
          f"the API's CPU per /v1/embeddings: {statistics.median(cpu_ms):.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
