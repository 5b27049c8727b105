"""Chat logprobs from hotpath's OpenAI API beside vLLM's own OpenAI server, on one prompt (starts nothing).

    .venv/bin/python scripts/compare_logprobs.py --hotpath http://127.0.0.1:8080/v1 --vllm http://127.0.0.1:8011/v1

Asks both for a greedy chat completion with logprobs and top_logprobs, and prints the max abs difference of the
chosen tokens' log-probabilities over the tokens both chose alike (the first position where the tokens differ
ends the comparison, and is reported). hotpath leaves out the end-of-sequence token's entry (its text does not
hold it); vLLM's server lists it, so a trailing extra entry on its side is expected. Both servers should run
the same weights in the same dtype (hotpath: the `dtype` parameter of text_generation; vLLM: --dtype) for the
figure to measure the path, not the precision.
"""

from __future__ import annotations

import argparse
import json
import sys

import openai

PROMPT = [{"role": "system", "content": "You answer in one short sentence."},
          {"role": "user", "content": "What is the capital of France?"}]


def ask(base_url: str, model: str, max_tokens: int, top: int, messages: list[dict]):
    with openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=300) as client:
        answer = client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=max_tokens,
                                                logprobs=True, top_logprobs=top)
    choice = answer.choices[0]
    return choice.message.content, choice.logprobs.content


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hotpath", required=True, help="hotpath's OpenAI API base URL (.../v1)")
    parser.add_argument("--vllm", required=True, help="vLLM's OpenAI server base URL (.../v1)")
    parser.add_argument("--hotpath-model", default="text_generation")
    parser.add_argument("--vllm-model", default=None, help="default: the first model the vLLM server lists")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--top-logprobs", type=int, default=5)
    parser.add_argument("--prompt", default=None, help="a user message (default: a fixed two-message chat)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    args = parser.parse_args(argv)

    messages = PROMPT if args.prompt is None else [{"role": "user", "content": args.prompt}]
    vllm_model = args.vllm_model
    if vllm_model is None:
        with openai.OpenAI(base_url=args.vllm, api_key="unused", max_retries=0) as client:
            vllm_model = client.models.list().data[0].id
    ours_text, ours = ask(args.hotpath, args.hotpath_model, args.max_tokens, args.top_logprobs, messages)
    theirs_text, theirs = ask(args.vllm, vllm_model, args.max_tokens, args.top_logprobs, messages)

    common, diffs, top_diffs = 0, [], []
    for a, b in zip(ours, theirs):
        if a.token != b.token:
            break
        common += 1
        diffs.append(abs(a.logprob - b.logprob))
        theirs_top = {t.token: t.logprob for t in b.top_logprobs}
        top_diffs += [abs(t.logprob - theirs_top[t.token]) for t in a.top_logprobs if t.token in theirs_top]
    figures = {"hotpath_tokens": len(ours), "vllm_tokens": len(theirs), "same_tokens": common,
               "first_difference": None if common == min(len(ours), len(theirs)) else common,
               "max_abs_diff_chosen": max(diffs) if diffs else None,
               "max_abs_diff_top": max(top_diffs) if top_diffs else None,
               "same_text": ours_text == theirs_text}
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"hotpath: {ours_text!r}\nvLLM:    {theirs_text!r}")
        for key, value in figures.items():
            print(f"{key}: {value}")
    return 0 if diffs else 1


if __name__ == "__main__":
    sys.exit(main())
