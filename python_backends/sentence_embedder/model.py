"""Sentence embedder: BYTES text in, the reference model's normalized embedding out, in one step.

HF `tokenizers` on the model's own tokenizer.json (exactly the reference pipeline's token ids, on
every script) and the pooled all-MiniLM-L6-v2 graph in ONNX Runtime, in this one process: no second
Python hop and no tensor hand-off between tokenizer and encoder. Per `execute()`: every request's
text is validated on its own (shape, UTF-8, `max_text_bytes` / `max_text_chars` before any
tokenizing), then all valid texts go through one `encode_batch` and one encoder call (one session
run for one text; for a batch, one run per core on length-sorted parts, at the same time). A bad request gets its own INVALID_ARGUMENT; the rest of the batch is served.
This model runs unchanged on the local server and in the production container (Python backend in
both), so what a request gets is the same on both by construction. Each answered request's tokens (its
texts' attention masks: special tokens in, padding out) are counted for its tenant
(hotpath_usage_embedding_tokens_total, hotpath.runtime.usage).
"""

import numpy as np
import triton_python_backend_utils as pb_utils

from hotpath.runtime.backend_args import parameters, version_dir
from hotpath.runtime.backend_io import fault_error, guarded, input_array, invalid
from hotpath.runtime.core_gate import CoreGate
from hotpath.runtime.embedder import INPUTS, Embedder
from hotpath.runtime.lifetime import exit_with_server
from hotpath.runtime.parameters import EmbedderParameters
from hotpath.runtime.text import encode, gather_texts
from hotpath.runtime.timing import ExecuteLog, timed
from hotpath.runtime.usage import TENANCY_REFUSED, Usage, tenants_of


class TritonPythonModel:
    def initialize(self, args):
        exit_with_server()   # a crashed tritonserver leaves no orphan stub (hotpath.runtime.lifetime)
        self.execute_log = ExecuteLog.open(args)
        params = EmbedderParameters.parse(parameters(args))
        # With several intra-op threads one text runs on all of them and a batch is cut by length into one
        # single-thread run per thread (hotpath.runtime.split_run); the spec ships one thread per instance,
        # and one text on two threads while the other instance idles (hotpath.runtime.core_gate).
        self.gate = CoreGate.for_instance(args["model_name"], args["model_instance_name"])
        self.embedder = Embedder(version_dir(args), params, gate=self.gate)
        self.limits = params.text_limits()
        self.usage = Usage(pb_utils, args["model_name"], ("embedding_tokens",))

    @timed
    @guarded(pb_utils, "sentence_embedder")
    def execute(self, requests):
        texts, spans, errors = gather_texts([input_array(pb_utils, r, "TEXT") for r in requests], self.limits)
        embeddings, fault, mask = None, None, None
        if texts:
            try:
                # Embedder.embed's two steps, so the attention mask (the tokens counted) is at hand
                feeds = encode(self.embedder.tokenizer, texts)
                mask = feeds["attention_mask"]
                embeddings = self.embedder.runner.run({n: feeds[n] for n in INPUTS})
            except Exception as exc:  # a fault of ours, not an input's: INTERNAL for the valid requests
                fault = fault_error(pb_utils, "sentence_embedder", exc)
        responses = []
        for span, error, tenant in zip(spans, errors, tenants_of(requests)):
            if error is None and tenant is None:
                error = TENANCY_REFUSED
            if error is not None:
                responses.append(invalid(pb_utils, "sentence_embedder", error))
            elif fault is not None:
                responses.append(pb_utils.InferenceResponse(error=fault))
            else:
                self.usage.add("embedding_tokens", tenant, int(mask[span[0]:span[1]].sum()))
                responses.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("EMBEDDING", np.ascontiguousarray(embeddings[span[0]:span[1]]))]))
        return responses

    def finalize(self):
        self.usage.close()
        self.gate.close()
