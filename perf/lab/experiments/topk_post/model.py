"""Alternative (not deployed): top-5 softmax postprocess as its own Python-backend step.

Used only by perf/lab/studies/postprocess_choice.py to measure what a Python postprocess hop would cost
against doing softmax/top-k/label lookup inside the classifier graph.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.labels = np.array([f"class {i}".encode() for i in range(1000)], dtype=np.object_)

    def execute(self, requests):
        logits = [pb_utils.get_input_tensor_by_name(r, "LOGITS").as_numpy() for r in requests]
        sizes = [len(x) for x in logits]
        batch = np.concatenate(logits)  # one vectorized pass for the whole execute()
        exp = np.exp(batch - batch.max(axis=1, keepdims=True))
        probs = exp / exp.sum(axis=1, keepdims=True)
        ids = np.argsort(-probs, axis=1)[:, :5]
        scores = np.take_along_axis(probs, ids, axis=1).astype(np.float32)
        responses, start = [], 0
        for n in sizes:
            sl = slice(start, start + n)
            start += n
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("SCORES", scores[sl]),
                pb_utils.Tensor("CLASS_IDS", ids[sl].astype(np.int32)),
                pb_utils.Tensor("LABELS", self.labels[ids[sl]]),
            ]))
        return responses
