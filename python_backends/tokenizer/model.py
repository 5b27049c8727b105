"""Tokenizer: BYTES text in; input_ids, attention_mask, token_type_ids out.

All texts of all requests in one `execute()` go through a single `encode_batch` call, padded to the
longest sequence of that batch rounded up to `pad_to_multiple_of` (so the encoder's dynamic
batcher can group requests tokenized in different executions) and truncated at the model's
max_seq_length. Each request's tokens (its texts' attention masks: special tokens in, padding out) are
counted for its tenant (hotpath_usage_embedding_tokens_total, hotpath.runtime.usage). A request with non-UTF-8 bytes, a text over the spec's limits or a wrong shape gets
its own INVALID_ARGUMENT error, before anything is tokenized.
"""

import numpy as np
import triton_python_backend_utils as pb_utils

from hotpath.runtime.backend_args import parameters, version_dir
from hotpath.runtime.backend_io import guarded, input_array, invalid
from hotpath.runtime.lifetime import exit_with_server
from hotpath.runtime.parameters import TokenizerParameters
from hotpath.runtime.text import encode, gather_texts
from hotpath.runtime.timing import ExecuteLog, timed
from hotpath.runtime.usage import TENANCY_REFUSED, Usage, tenants_of

OUTPUTS = ("input_ids", "attention_mask", "token_type_ids")


class TritonPythonModel:
    def initialize(self, args):
        exit_with_server()   # a crashed tritonserver leaves no orphan stub (hotpath.runtime.lifetime)
        self.execute_log = ExecuteLog.open(args)
        params = TokenizerParameters.parse(parameters(args))
        self.tokenizer = params.load_tokenizer(version_dir(args))
        self.limits = params.text_limits()
        self.usage = Usage(pb_utils, args["model_name"], ("embedding_tokens",))

    @timed
    @guarded(pb_utils, "tokenizer")
    def execute(self, requests):
        texts, spans, errors = gather_texts([input_array(pb_utils, r, "TEXT") for r in requests], self.limits)
        encoded = encode(self.tokenizer, texts) if texts else {}
        responses = []
        for span, error, tenant in zip(spans, errors, tenants_of(requests)):
            if error is None and tenant is None:
                error = TENANCY_REFUSED
            if error is not None:
                responses.append(invalid(pb_utils, "tokenizer", error))
                continue
            start, stop = span
            self.usage.add("embedding_tokens", tenant, int(encoded["attention_mask"][start:stop].sum()))
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor(name, np.ascontiguousarray(encoded[name][start:stop])) for name in OUTPUTS]))
        return responses

    def finalize(self):
        self.usage.close()
