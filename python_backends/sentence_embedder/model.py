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
from hotpath.runtime.backend_io import fault_error, guarded, input_array, invalid
from hotpath.runtime.embedder import Embedder
from hotpath.runtime.lifetime import exit_with_server
from hotpath.runtime.parameters import EmbedderParameters
from hotpath.runtime.text import gather_texts
from hotpath.runtime.timing import ExecuteLog, timed


class TritonPythonModel:
    def initialize(self, args):
        exit_with_server()   # a crashed tritonserver leaves no orphan stub (hotpath.runtime.lifetime)
        self.execute_log = ExecuteLog.open(args)
        params = EmbedderParameters.parse(parameters(args))
        # With several intra-op threads one text runs on all of them and a batch is cut by length into one
        # single-thread run per thread (hotpath.runtime.split_run); the spec ships one thread per instance.
        self.embedder = Embedder(version_dir(args), params)
        self.limits = params.text_limits()

    @timed
    @guarded(pb_utils, "sentence_embedder")
    def execute(self, requests):
        texts, spans, errors = gather_texts([input_array(pb_utils, r, "TEXT") for r in requests], self.limits)
        embeddings, fault = None, None
        if texts:
            try:
                embeddings = self.embedder.embed(texts)
            except Exception as exc:  # a fault of ours, not an input's: INTERNAL for the valid requests
                fault = fault_error(pb_utils, "sentence_embedder", exc)
        responses = []
        for span, error in zip(spans, errors):
            if error is not None:
                responses.append(invalid(pb_utils, "sentence_embedder", error))
            elif fault is not None:
                responses.append(pb_utils.InferenceResponse(error=fault))
            else:
                responses.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("EMBEDDING", np.ascontiguousarray(embeddings[span[0]:span[1]]))]))
        return responses
