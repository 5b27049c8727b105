"""Local stand-in for Triton's native onnxruntime backend (staged copies only).

The tritonserver in the nvidia-pytriton wheel ships only the Python backend, so `hotpath serve`
serves onnxruntime-backend models through this runner in a staged copy of the repository. It
honours the native backend's `intra_op_thread_count` / `inter_op_thread_count` parameters and runs
every `execute()` as one batched session call.
"""

import numpy as np
import triton_python_backend_utils as pb_utils

from hotpath.runtime.backend_args import model_config, parameters, version_dir
from hotpath.runtime.batching import run_batched
from hotpath.runtime.ort_session import make_session
from hotpath.runtime.timing import ExecuteLog, timed


class TritonPythonModel:
    def initialize(self, args):
        self.execute_log = ExecuteLog.open(args)
        params = parameters(args)
        config = model_config(args)
        self.input_names = [t["name"] for t in config["input"]]
        self.output_names = [t["name"] for t in config["output"]]
        self.session = make_session(
            version_dir(args) / params.get("default_model_filename", "model.onnx"),
            intra_op_threads=int(params.get("intra_op_thread_count", 0)),
            inter_op_threads=int(params.get("inter_op_thread_count", 0)),
            allow_spinning=params.get("allow_spinning", "false").lower() in ("1", "true"),
        )

    @timed
    def execute(self, requests):
        feeds = [{name: pb_utils.get_input_tensor_by_name(r, name).as_numpy() for name in self.input_names}
                 for r in requests]
        results = run_batched(lambda batch: self.session.run(self.output_names, batch), self.output_names, feeds)
        responses = []
        for result in results:
            if isinstance(result, Exception):
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"onnxruntime: {result}")))
            else:
                responses.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor(n, np.ascontiguousarray(a)) for n, a in result.items()]))
        return responses
