"""Local stand-in for Triton's native onnxruntime backend (staged copies only).

The tritonserver in the nvidia-pytriton wheel ships only the Python backend, so `hotpath serve`
serves onnxruntime-backend models through this runner in a staged copy of the repository. It
honours the native backend's `intra_op_thread_count` / `inter_op_thread_count` parameters and runs
every `execute()` as one batched session call, registers the config's `model_operations` op
libraries (onnxruntime-extensions for in-graph tokenizers), and decodes TYPE_STRING inputs as
UTF-8 per request, so a request with invalid text, or text over the config's `max_text_bytes` /
`max_text_chars`, fails alone with INVALID_ARGUMENT before the session runs.
"""

import numpy as np
import triton_python_backend_utils as pb_utils

from hotpath.runtime.backend_args import model_config, parameters, version_dir
from hotpath.runtime.batching import run_batched
from hotpath.runtime.ort_session import make_session
from hotpath.runtime.text import decode_utf8, text_limits
from hotpath.runtime.timing import ExecuteLog, timed


class TritonPythonModel:
    def initialize(self, args):
        self.execute_log = ExecuteLog.open(args)
        params = parameters(args)
        config = model_config(args)
        self.input_names = [t["name"] for t in config["input"]]
        self.string_inputs = {t["name"] for t in config["input"] if t["data_type"] == "TYPE_STRING"}
        self.output_names = [t["name"] for t in config["output"]]
        self.text_limits = text_limits(params)
        self.session = make_session(
            version_dir(args) / params.get("default_model_filename", "model.onnx"),
            intra_op_threads=int(params.get("intra_op_thread_count", 0)),
            inter_op_threads=int(params.get("inter_op_thread_count", 0)),
            allow_spinning=params.get("allow_spinning", "false").lower() in ("1", "true"),
            op_libraries=tuple(config.get("model_operations", {}).get("op_library_filename", [])),
        )

    @timed
    def execute(self, requests):
        feeds, errors = [], {}
        for i, request in enumerate(requests):
            try:
                feeds.append({name: self._input(request, name) for name in self.input_names})
            except ValueError as exc:
                errors[i] = pb_utils.TritonError(f"{exc}", pb_utils.TritonError.INVALID_ARG)
        results = iter(run_batched(lambda batch: self.session.run(self.output_names, batch), self.output_names,
                                   feeds))
        responses = []
        for i in range(len(requests)):
            result = errors[i] if i in errors else next(results)
            if isinstance(result, pb_utils.TritonError):
                responses.append(pb_utils.InferenceResponse(error=result))
            elif isinstance(result, Exception):
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"onnxruntime: {result}")))
            else:
                responses.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor(n, np.ascontiguousarray(a)) for n, a in result.items()]))
        return responses

    def _input(self, request, name):
        array = pb_utils.get_input_tensor_by_name(request, name).as_numpy()
        if name in self.string_inputs:
            # ORT reads Python str objects; BYTES arrive as bytes (and would be read as "b'...'").
            return np.array(decode_utf8(array, **self.text_limits), dtype=object).reshape(array.shape)
        return array
