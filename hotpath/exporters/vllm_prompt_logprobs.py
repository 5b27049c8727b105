"""Teacher-forced next-token figures from vLLM itself: `prompt_logprobs` (SamplingParams), the field's way.

Run by the vLLM environment's interpreter (it imports vllm only, never hotpath) for
hotpath.exporters.llm_precision:

    <vllm venv>/bin/python vllm_prompt_logprobs.py REQUEST.json RESULT.json

REQUEST.json: {"model": dir, "dtype": "float32"|"bfloat16", "quantization": null|name, "windows": [[ids...]]}.
RESULT.json:  {"windows": [{"top1": [...], "logprob": [...]}]}, n-1 entries per window of n tokens: at each
position the engine's top-1 next token and the log-probability of the token that actually follows (raw
logits: vLLM's default logprobs mode). vLLM writes to stdout, hence the result file.

The process ends with os._exit once the result is written: vLLM 0.32's CPU build aborts at interpreter exit
("terminate called without an active exception", SIGABRT) in about one run in three, after its engine has shut
down cleanly (docs/runtime_notes.md).
"""

from __future__ import annotations

import json
import os
import sys


def main(request_path: str, result_path: str) -> int:
    request = json.loads(open(request_path).read())
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    windows = request["windows"]
    llm = LLM(model=request["model"], dtype=request["dtype"], quantization=request.get("quantization"),
              enforce_eager=True, enable_prefix_caching=False, max_model_len=max(map(len, windows)) + 8,
              seed=0)
    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=1)
    outputs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in windows], params, use_tqdm=False)
    llm.llm_engine.engine_core.shutdown()   # stop the engine process now: os._exit below runs no finalizers
    result = []
    for ids, out in zip(windows, outputs):
        top1, logprob = [], []
        for i in range(1, len(ids)):
            entry = out.prompt_logprobs[i]     # position i: log p(ids[i] | ids[:i]) and the top-ranked token
            top1.append(next(t for t, lp in entry.items() if lp.rank == 1))
            logprob.append(entry[ids[i]].logprob)
        result.append({"top1": top1, "logprob": logprob})
    partial = result_path + ".partial"
    with open(partial, "w") as f:
        json.dump({"windows": result}, f)
    os.replace(partial, result_path)    # the caller never reads a half-written file
    return 0


if __name__ == "__main__":
    code = main(*sys.argv[1:3])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
