"""Where a vLLM decode step goes, in process (no Triton, no stub, no gRPC): scheduler, model forward, sampling,
output update, and the rest of the loop (detokenization, output processing), per step.

Run by the vLLM environment's interpreter (vLLM only, never hotpath), for `python -m perf study generation_compare
--steps` (perf/reports/text_generation.md, benchmark section):

    <vllm venv>/bin/python vllm_steps.py MODEL_DIR DTYPE BATCH MAX_TOKENS RESULT.json

The engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, the "uni" executor), with the same
engine arguments the served model uses by default on CPU (eager). EngineCore's scheduler and executor
methods are wrapped with timers; only decode steps (one token per running sequence) are kept.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time


def main(model: str, dtype: str, batch: int, max_tokens: int, result_path: str, reps: int = 3) -> int:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")   # GiB; else vLLM reserves 92% of RAM
    from vllm import LLM, SamplingParams

    llm = LLM(model=model, dtype=dtype, enforce_eager=True, distributed_executor_backend="uni", max_model_len=1024,
              seed=0)
    core = llm.llm_engine.engine_core.engine_core
    times: dict[str, list[float]] = {}
    current: dict[str, float] = {}

    def timed(owner, name: str, key: str):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                current[key] = current.get(key, 0.0) + time.perf_counter() - t0
        setattr(owner, name, wrapper)

    timed(core.scheduler, "schedule", "scheduler")
    timed(core.scheduler, "update_from_output", "update")
    timed(core.model_executor, "execute_model", "forward")
    timed(core.model_executor, "sample_tokens", "sampling")
    step = core.step_fn          # what the in-process client calls: step, or step_with_batch_queue

    def step_wrapper(*args, **kwargs):
        current.clear()
        t0 = time.perf_counter()
        out = step(*args, **kwargs)
        current["step"] = time.perf_counter() - t0
        current["_at"] = time.perf_counter()
        decode = out[1] and bool(core.scheduler.running) and all(
            r.num_computed_tokens >= r.num_prompt_tokens for r in core.scheduler.running)
        if decode:
            for k, v in current.items():
                times.setdefault(k, []).append(v)
        return out
    core.step_fn = step_wrapper

    prompts = [f"Write a short story about a robot named Unit {i} who learns to paint." for i in range(batch)]
    params = SamplingParams(max_tokens=max_tokens, min_tokens=max_tokens, temperature=0.0)
    llm.generate(prompts, params, use_tqdm=False)          # warm-up
    times.clear()
    walls = []
    for _ in range(reps):
        t0 = time.perf_counter()
        llm.generate(prompts, SamplingParams(max_tokens=1, temperature=0.0), use_tqdm=False)
        prefill = time.perf_counter() - t0
        t0 = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        walls.append((time.perf_counter() - t0 - prefill) / (max_tokens - 1))
    stats = {k: statistics.median(v) * 1000 for k, v in times.items() if not k.startswith("_")}
    stats["wall_per_step"] = statistics.median(walls) * 1000
    stats["steps"] = len(times.get("step", []))
    with open(result_path, "w") as f:
        json.dump(stats, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]))
