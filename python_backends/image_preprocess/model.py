"""Image preprocess: encoded image bytes (JPEG, PNG, WebP) in, uint8 [224, 224, 3] RGB out.

Each image is decoded on its own (decoding is per image by nature); the outputs of all requests of
one `execute()` go to the classifier together through Triton's dynamic batcher. A corrupt,
truncated, empty, non-image or oversized input fails its own request only, with INVALID_ARGUMENT
(never retried); anything else that goes wrong is a server fault (INTERNAL).
"""

import triton_python_backend_utils as pb_utils

from hotpath.runtime.backend_args import parameters
from hotpath.runtime.backend_io import fault, guarded, input_array, invalid
from hotpath.runtime.images import PreprocessOptions, preprocess_request
from hotpath.runtime.inputs import InputError
from hotpath.runtime.lifetime import exit_with_server
from hotpath.runtime.timing import ExecuteLog, timed
from hotpath.runtime.usage import TENANCY_REFUSED, Usage, tenants_of


class TritonPythonModel:
    def initialize(self, args):
        exit_with_server()   # a crashed tritonserver leaves no orphan stub (hotpath.runtime.lifetime)
        self.execute_log = ExecuteLog.open(args)
        self.options = PreprocessOptions.parse(parameters(args))
        self.usage = Usage(pb_utils, args["model_name"], ("images",))

    @timed
    @guarded(pb_utils, "image_preprocess")
    def execute(self, requests):
        responses = []
        for request, tenant in zip(requests, tenants_of(requests)):
            if tenant is None:
                responses.append(invalid(pb_utils, "image_preprocess", TENANCY_REFUSED))
                continue
            try:
                pixels = preprocess_request(input_array(pb_utils, request, "IMAGE"), self.options)
            except InputError as exc:
                responses.append(invalid(pb_utils, "image_preprocess", str(exc)))
                continue
            except Exception as exc:  # a fault of ours, not the input's: INTERNAL, and only this request
                responses.append(fault(pb_utils, "image_preprocess", exc))
                continue
            self.usage.add("images", tenant, len(pixels))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("PIXELS", pixels)]))
        return responses

    def finalize(self):
        self.usage.close()
