"""The engine process: vLLM's AsyncLLM behind JSON lines on pipes (run by the vLLM venv's Python).

    <vllm venv>/bin/python engine_process.py '<settings JSON>'

Started by hotpath.runtime.llm.engine_client from text_generation's Triton stub. The stub's environment
keeps numpy 1.26 (Triton 2.51's stub mis-reads string tensors under numpy 2) and vLLM needs numpy 2, so
the engine lives here (docs/runtime_notes.md). Standard library + vLLM only.

In (stdin), one JSON object a line:
    {"op": "add", "id", "text" | "messages", "sampling": {...}, "prompt_text": bool}
        (sampling as hotpath.runtime.llm.request checked it; structured_outputs: {kind: constraint}, one of
        json, json_object, regex, choice, for vLLM's StructuredOutputsParams)
    {"op": "abort", "id"}
Out (the protocol fd: the original stdout; vLLM's own prints go to stderr):
    {"op": "ready", "dtype", "max_model_len", "kv_capacity_tokens"}
    {"id", "text": delta, "tokens": n, "finish": null | "stop" | "length" | "cancelled",
     "input_tokens", "output_tokens", "prompt": str (first reply, when asked)}
    {"id", "error": message, "status": "INVALID_ARGUMENT" | "INTERNAL"}         (the request's last reply;
        INVALID_ARGUMENT also when vLLM refuses the request itself, e.g. a schema its grammar backend cannot compile)
    {"op": "stats", "running", "waiting", "kv_usage", "preempted", "prefix_hits", "prefix_misses",
     "prefix_tokens", "ttft": [s...], "itl": [s...]}                              (about once a second)
Every request gets exactly one last reply (finish set, or error). stdin closing (the stub is gone or
unloading) shuts the engine down and ends this process: the engine never outlives its stub.
"""

import asyncio
import json
import locale
import os
import sys
import time

# The protocol gets the original stdout; vLLM and its EngineCore print there, so stdout becomes stderr.
_PROTOCOL = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
os.dup2(2, 1)
sys.stdout = sys.stderr
# The stub runs with an ASCII locale: torch's import decodes files with the locale's encoding.
os.environ.setdefault("LC_ALL", "C.UTF-8")
locale.setlocale(locale.LC_ALL, "")

STATS_INTERVAL_S = 1.0
FINISH = {"stop": "stop", "length": "length", "abort": "cancelled"}
MAX_REFUSAL_CHARS = 300


def refusal(exc: Exception) -> str:
    """vLLM's reason for refusing a request, short: one line, no file paths (its message only, no traceback)."""
    words = ["<path>" if "/" in w and (w.startswith("/") or ".py" in w) else w for w in str(exc).split()]
    text = " ".join(words)
    return text[:MAX_REFUSAL_CHARS] + ("..." if len(text) > MAX_REFUSAL_CHARS else "")


def send(message: dict) -> None:
    _PROTOCOL.write(json.dumps(message, ensure_ascii=False) + "\n")


class Stats:
    """What vLLM's stat loggers see, gathered between two stats lines (vLLM's own TTFT and ITL samples)."""

    def __init__(self):
        self.running = self.waiting = 0
        self.kv_usage = 0.0
        self.preempted = self.prefix_hits = self.prefix_misses = self.prefix_tokens = 0
        self.ttft: list[float] = []
        self.itl: list[float] = []
        self.changed = True

    def drain(self) -> dict | None:
        if not self.changed:
            return None
        out = {"op": "stats", "running": self.running, "waiting": self.waiting, "kv_usage": self.kv_usage,
               "preempted": self.preempted, "prefix_hits": self.prefix_hits, "prefix_misses": self.prefix_misses,
               "prefix_tokens": self.prefix_tokens, "ttft": self.ttft[:1000], "itl": self.itl[:5000]}
        self.preempted = self.prefix_hits = self.prefix_misses = self.prefix_tokens = 0
        self.ttft, self.itl, self.changed = [], [], False
        return out


STATS = Stats()


def stat_logger_factory():
    from vllm.v1.metrics.loggers import StatLoggerBase

    class HotpathStatLogger(StatLoggerBase):
        def __init__(self, vllm_config, engine_index=0):
            self.config = vllm_config

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0, *args, **kwargs):
            if scheduler_stats is not None:
                STATS.running, STATS.waiting = scheduler_stats.num_running_reqs, scheduler_stats.num_waiting_reqs
                STATS.kv_usage = float(scheduler_stats.kv_cache_usage)
                STATS.changed = True
            if iteration_stats is not None:
                STATS.preempted += iteration_stats.num_preempted_reqs
                STATS.ttft.extend(iteration_stats.time_to_first_tokens_iter)
                STATS.itl.extend(iteration_stats.inter_token_latencies_iter)
                STATS.changed = True

        def log_engine_initialized(self):
            pass

    return HotpathStatLogger


class Server:
    def __init__(self, settings: dict):
        self.settings = settings
        self.tasks: dict[str, asyncio.Task] = {}

    async def start(self) -> None:
        from vllm.config import StructuredOutputsConfig
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        s = self.settings
        args = AsyncEngineArgs(model=s["model"], tokenizer=s["model"], dtype=s["dtype"],
                               max_model_len=s["max_model_len"], max_num_seqs=s["max_num_seqs"],
                               enable_prefix_caching=s["enable_prefix_caching"], enforce_eager=s["enforce_eager"],
                               kv_cache_memory_bytes=s["kv_cache_mib"] << 20, block_size=s["block_size"],
                               disable_log_stats=False,
                               # One grammar backend, named: vLLM v1's engine core compiles every request
                               # with the backend of the first structured request it saw, while "auto" checks
                               # each request against xgrammar or else guidance. Measured here: a schema
                               # guidance accepted then failed to compile in an xgrammar engine core, and the
                               # same schema was answered by a guidance one: what passed depended on history.
                               # xgrammar checks every request as it will compile it.
                               structured_outputs_config=StructuredOutputsConfig(backend="xgrammar"),
                               seed=0)
        self.engine = AsyncLLM.from_engine_args(args, stat_loggers=[stat_logger_factory()])
        self.tokenizer = self.engine.get_tokenizer()
        cache = self.engine.vllm_config.cache_config
        self.max_model_len = self.engine.vllm_config.model_config.max_model_len
        send({"op": "ready", "dtype": str(self.engine.vllm_config.model_config.dtype).removeprefix("torch."),
              "max_model_len": self.max_model_len,
              "kv_capacity_tokens": int((cache.num_gpu_blocks or 0) * cache.block_size)})

    def prompt(self, message: dict) -> tuple[list[int], str]:
        """(token ids, prompt text): text_input as is, messages through the model's chat template."""
        if message.get("messages") is not None:
            text = self.tokenizer.apply_chat_template(message["messages"], tokenize=False, add_generation_prompt=True)
            return self.tokenizer.encode(text, add_special_tokens=False), text
        return self.tokenizer.encode(message["text"]), message["text"]

    async def generate(self, message: dict) -> None:
        from vllm import SamplingParams
        from vllm.exceptions import VLLMClientError
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        rid = message["id"]
        started = False
        try:
            ids, text = self.prompt(message)
            sampling = dict(message["sampling"])
            room = self.max_model_len - len(ids)
            if room < 1:
                send({"id": rid, "status": "INVALID_ARGUMENT",
                      "error": f"the prompt is {len(ids)} tokens, the context holds {self.max_model_len}"})
                return
            wanted = sampling.pop("max_tokens", None)
            if wanted is not None and wanted > room:
                send({"id": rid, "status": "INVALID_ARGUMENT",
                      "error": f"sampling_parameters.max_tokens {wanted} + the prompt's {len(ids)} tokens exceed "
                               f"the context of {self.max_model_len}"})
                return
            max_tokens = wanted if wanted is not None else min(self.settings["default_max_tokens"], room)
            params = SamplingParams(max_tokens=max_tokens, temperature=sampling.get("temperature", 0.0),
                                    top_p=sampling.get("top_p", 1.0), top_k=sampling.get("top_k", -1),
                                    seed=sampling.get("seed"), stop=sampling.get("stop"),
                                    min_tokens=min(sampling.get("min_tokens", 0), max_tokens),
                                    output_kind=RequestOutputKind.DELTA)
            if sampling.get("structured_outputs"):
                params.structured_outputs = StructuredOutputsParams(**sampling["structured_outputs"])
            first, produced = True, 0
            async for out in self.engine.generate({"prompt_token_ids": ids}, params, request_id=rid):
                started = True
                choice = out.outputs[0]
                produced += len(choice.token_ids)
                if out.finished and choice.finish_reason == "error":
                    # vLLM ended the request itself. Before any token of a constrained request: its grammar
                    # passed vLLM's front-end check but failed to compile in the engine core (measured:
                    # xgrammar on minimum > maximum), which logs why; the engine goes on serving.
                    if params.structured_outputs is not None and produced == 0:
                        send({"id": rid, "status": "INVALID_ARGUMENT",
                              "error": "vLLM refused the request: its grammar backend could not compile "
                                       "sampling_parameters.structured_outputs"})
                    else:
                        send({"id": rid, "status": "INTERNAL", "error": "generation failed (vLLM ended the request)"})
                    return
                reply = {"id": rid, "text": choice.text, "tokens": len(choice.token_ids), "finish": None,
                         "input_tokens": len(ids), "output_tokens": produced}
                if first:
                    first = False
                    cached = int(out.num_cached_tokens or 0)
                    if cached:
                        STATS.prefix_hits += 1
                        STATS.prefix_tokens += cached
                    else:
                        STATS.prefix_misses += 1
                    if message.get("prompt_text"):
                        reply["prompt"] = text
                if out.finished:
                    reply["finish"] = FINISH.get(choice.finish_reason or "stop", "stop")
                send(reply)
                if out.finished:
                    return
            send({"id": rid, "text": "", "tokens": 0, "finish": "cancelled", "input_tokens": len(ids),
                  "output_tokens": produced})
        except asyncio.CancelledError:
            send({"id": rid, "text": "", "tokens": 0, "finish": "cancelled", "input_tokens": 0, "output_tokens": 0})
        except Exception as exc:  # noqa: BLE001 - one request's failure is its own last reply
            # vLLM's own validation refusing the request (a schema or regex its grammar backend cannot
            # compile: VLLMClientError, or ValueError from a grammar before the first token) is the request's
            # fault; anything else is the engine's.
            constrained = bool(message.get("sampling", {}).get("structured_outputs"))
            if isinstance(exc, VLLMClientError) or (isinstance(exc, ValueError) and constrained and not started):
                print(f"hotpath engine: request {rid} refused: {exc!r}", file=sys.stderr, flush=True)
                send({"id": rid, "status": "INVALID_ARGUMENT", "error": f"vLLM refused the request: {refusal(exc)}"})
                return
            print(f"hotpath engine: request {rid} failed: {exc!r}", file=sys.stderr, flush=True)
            send({"id": rid, "status": "INTERNAL", "error": f"generation failed ({type(exc).__name__})"})
        finally:
            self.tasks.pop(rid, None)

    def handle(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            print(f"hotpath engine: unreadable line {line[:100]!r}", file=sys.stderr, flush=True)
            return
        if message.get("op") == "add":
            rid = message["id"]
            task = asyncio.get_running_loop().create_task(self.generate(message))
            self.tasks[rid] = task
            task.add_done_callback(lambda t, rid=rid: self._ended(t, rid))
        elif message.get("op") == "abort":
            task = self.tasks.get(message["id"])
            if task is not None:
                task.cancel()   # closing generate()'s iterator aborts the request in vLLM: its KV is freed

    def _ended(self, task: asyncio.Task, rid: str) -> None:
        """A task cancelled before it ran sent nothing: its request still gets its last reply."""
        self.tasks.pop(rid, None)
        if task.cancelled():
            send({"id": rid, "text": "", "tokens": 0, "finish": "cancelled", "input_tokens": 0, "output_tokens": 0})

    async def stats_loop(self) -> None:
        while True:
            await asyncio.sleep(STATS_INTERVAL_S)
            stats = STATS.drain()
            if stats is not None:
                send(stats)

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 26)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        stats = loop.create_task(self.stats_loop())
        while line := await reader.readline():
            self.handle(line)
        stats.cancel()
        for task in list(self.tasks.values()):
            task.cancel()


async def main() -> None:
    settings = json.loads(sys.argv[1])
    started = time.monotonic()
    server = Server(settings)
    await server.start()
    print(f"hotpath engine: ready in {time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)
    await server.serve()
    server.engine.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
    os._exit(0)
