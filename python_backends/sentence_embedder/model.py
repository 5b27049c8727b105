"""Sentence embedder: BYTES text in, the reference model's normalized embedding out, in one step.

HF `tokenizers` on the model's own tokenizer.json (exactly the reference pipeline's token ids, on
every script) and the pooled all-MiniLM-L6-v2 graph in ONNX Runtime, in this one process: no second
Python hop and no tensor hand-off between tokenizer and encoder. Per `execute()`: every request's
text is validated on its own (shape, UTF-8, `max_text_bytes` / `max_text_chars` before any
tokenizing), then all valid texts go through one `encode_batch` and one session run, padded to that
batch's longest text. A bad request gets its own INVALID_ARGUMENT; the rest of the batch is served.
This model runs unchanged on the local server and in the production container (Python backend in
both), so what a request gets is the same on both by construction.
"""

import numpy as np
import triton_python_backend_utils as pb_utils

from hotpath.runtime.backend_args import parameters, version_dir
from hotpath.runtime.ort_session import make_session
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
        self.session = make_session(
            folder / EXPORT_DIR / "model.onnx",
            intra_op_threads=int(params.get("intra_op_thread_count", 0)),
            inter_op_threads=int(params.get("inter_op_thread_count", 0)),
            allow_spinning=params.get("allow_spinning", "false").lower() in ("1", "true"))
        self.output_name = self.session.get_outputs()[0].name

    @timed
    def execute(self, requests):
        texts, spans, errors = gather_texts(
            [pb_utils.get_input_tensor_by_name(r, "TEXT").as_numpy() for r in requests], self.limits)
        embeddings, fault = None, None
        if texts:
            try:
                feeds = encode(self.tokenizer, texts)
                embeddings = self.session.run([self.output_name], {n: feeds[n] for n in INPUTS})[0]
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
