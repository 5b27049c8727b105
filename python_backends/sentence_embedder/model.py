"""Sentence embedder: BYTES text in, the reference model's normalized embedding out, in one step.

HF `tokenizers` on the model's own tokenizer.json (exactly the reference pipeline's token ids, on
every script) and the pooled all-MiniLM-L6-v2 graph in ONNX Runtime, in this one process: no second
Python hop and no tensor hand-off between tokenizer and encoder. Per `execute()`: every request's
text is validated on its own (shape, UTF-8, `max_text_bytes` / `max_text_chars` before any
tokenizing), then all valid texts go through one `encode_batch` and one encoder call (one session
run for one text; for a batch, one run per core on length-sorted parts, at the same time). A bad request gets its own INVALID_ARGUMENT; the rest of the batch is served.
This model runs unchanged on the local server and in the production container (Python backend in
both), so what a request gets is the same on both by construction.
"""

import numpy as np
import triton_python_backend_utils as pb_utils

from hotpath.runtime.backend_args import parameters, version_dir
from hotpath.runtime.split_run import SplitRunner
from hotpath.runtime.text import encode, gather_texts, load_tokenizer, text_limits
from hotpath.runtime.timing import ExecuteLog, timed

EXPORT_DIR = "export"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class TritonPythonModel:
    def initialize(self, args):
        self.execute_log = ExecuteLog.open(args)
        params = parameters(args)
        folder = version_dir(args)
        self.tokenizer = load_tokenizer(folder / params.get("tokenizer_file", "tokenizer.json"),
                                        max_length=int(params["max_length"]),
                                        pad_to_multiple_of=int(params.get("pad_to_multiple_of", 0)) or None)
        self.limits = text_limits(params)
        # One text runs on every intra-op thread; a batch is cut by length into one single-thread run
        # per thread, at the same time (hotpath.runtime.split_run: low latency alone, throughput in load).
        self.encoder = SplitRunner(
            folder / EXPORT_DIR / "model.onnx", threads=int(params.get("intra_op_thread_count", 1)),
            split_from=int(params.get("split_from", 2)),
            allow_spinning=params.get("allow_spinning", "false").lower() in ("1", "true"))

    @timed
    def execute(self, requests):
        texts, spans, errors = gather_texts(
            [pb_utils.get_input_tensor_by_name(r, "TEXT").as_numpy() for r in requests], self.limits)
        embeddings, fault = None, None
        if texts:
            try:
                feeds = encode(self.tokenizer, texts)
                embeddings = self.encoder.run({n: feeds[n] for n in INPUTS})
            except Exception as exc:  # a fault of ours, not an input's: INTERNAL for the valid requests
                fault = pb_utils.TritonError(f"sentence_embedder: internal error: {type(exc).__name__}: {exc}")
        responses = []
        for span, error in zip(spans, errors):
            if error is not None:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    f"sentence_embedder: {error}", pb_utils.TritonError.INVALID_ARG)))
            elif fault is not None:
                responses.append(pb_utils.InferenceResponse(error=fault))
            else:
                responses.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("EMBEDDING", np.ascontiguousarray(embeddings[span[0]:span[1]]))]))
        return responses
