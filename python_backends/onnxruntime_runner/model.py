"""Local stand-in for Triton's native onnxruntime backend (staged copies only).

The tritonserver in the nvidia-pytriton wheel ships only the Python backend, so `hotpath serve`
serves onnxruntime-backend models through this runner in a staged copy of the repository. It
honours the native backend's `intra_op_thread_count` / `inter_op_thread_count` parameters, registers
the config's `model_operations` op libraries, and runs every `execute()` as one batched session call.
Like the native backend it gives requests no isolation: a failed call fails every request batched
in it. So that the stand-in cannot hide what production does, it refuses TYPE_STRING inputs (hotpath
validates text in a Python step in front of any native model; hotpath.specs.config_pbtxt refuses such specs).
"""

import numpy as np
import triton_python_backend_utils as pb_utils

from hotpath.runtime.backend_args import model_config, parameters, version_dir
from hotpath.runtime.backend_io import guarded
from hotpath.runtime.batching import run_batched
from hotpath.runtime.lifetime import exit_with_server
from hotpath.runtime.ort_session import make_session
from hotpath.runtime.parameters import RunnerParameters
from hotpath.runtime.timing import ExecuteLog, timed


class TritonPythonModel:
    def initialize(self, args):
        exit_with_server()   # a crashed tritonserver leaves no orphan stub (hotpath.runtime.lifetime)
        self.execute_log = ExecuteLog.open(args)
        params = RunnerParameters.parse(parameters(args))
        config = model_config(args)
        strings = [t["name"] for t in config["input"] if t["data_type"] == "TYPE_STRING"]
        if strings:
            raise pb_utils.TritonModelException(
                f"{args['model_name']}: TYPE_STRING input(s) {strings} on the onnxruntime backend: it validates no "
                f"text per request; put a Python step in front (this stand-in will not do what production cannot)")
        self.input_names = [t["name"] for t in config["input"]]
        self.output_names = [t["name"] for t in config["output"]]
        self.session = make_session(
            version_dir(args) / params.default_model_filename,
            intra_op_threads=params.intra_op_thread_count,
            inter_op_threads=params.inter_op_thread_count,
            **params.spin_settings(),
            op_libraries=tuple(config.get("model_operations", {}).get("op_library_filename", [])),
        )

    @timed
    @guarded(pb_utils, "onnxruntime")   # the native backend shows no Python traceback either; no per-request checks
    def execute(self, requests):
        feeds = [{name: pb_utils.get_input_tensor_by_name(r, name).as_numpy() for name in self.input_names}
                 for r in requests]
        results = run_batched(lambda batch: self.session.run(self.output_names, batch), self.output_names, feeds)
        responses = []
        for result in results:
            if isinstance(result, Exception):
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"onnxruntime: {result}")))
            else:
                responses.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor(n, np.ascontiguousarray(a)) for n, a in result.items()]))
        return responses
