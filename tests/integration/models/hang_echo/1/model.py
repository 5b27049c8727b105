"""Echoes TEXT; execute() sleeps forever in the stub whose PID the file `hang` beside config.pbtxt holds
(a hung stub: alive, healthy to Triton, never answering). A test writes the PID; a new stub serves."""

import os
import time
from pathlib import Path

import triton_python_backend_utils as pb_utils

from hotpath.runtime.lifetime import exit_with_server


class TritonPythonModel:
    def initialize(self, args):
        exit_with_server()
        self.flag = Path(args["model_repository"]) / "hang"

    def execute(self, requests):
        try:
            hang = self.flag.read_text().strip() == str(os.getpid())
        except OSError:
            hang = False
        while hang:
            time.sleep(3600)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("TEXT_OUT", pb_utils.get_input_tensor_by_name(
            r, "TEXT").as_numpy())]) for r in requests]
