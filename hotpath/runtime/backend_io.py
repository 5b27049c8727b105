"""What every hotpath Python model does with a request: read its inputs, answer its errors (`pb` is
triton_python_backend_utils, passed in so this is testable without Triton).

An input error is INVALID_ARGUMENT with the model's name and the reason. A fault of ours is INTERNAL (or
UNAVAILABLE for a store that cannot be reached) with a short message: the traceback goes to the server log
only, because the Python stub's own report of an escaped exception carries the traceback and the server's
file paths to the client.
"""

from __future__ import annotations

import functools
import sys
import traceback

from hotpath.runtime.errors import triton_code


def input_array(pb, request, name: str):
    """The input `name` of `request` as numpy, None when the request lacks it (the model says whether it may)."""
    tensor = pb.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


def invalid(pb, model: str, message: str):
    """INVALID_ARGUMENT for one request: the client's input, never retried."""
    return pb.InferenceResponse(error=pb.TritonError(f"{model}: {message}", pb.TritonError.INVALID_ARG))


def fault_error(pb, model: str, exc: BaseException, code=None):
    """A TritonError for a fault of ours: the exception's type only, its traceback to the server log; the
    code is `code`, else the exception's branch's (hotpath.runtime.errors: UNAVAILABLE or INTERNAL)."""
    print(f"{model}: internal error\n" + "".join(traceback.format_exception(exc)), file=sys.stderr, flush=True)
    return pb.TritonError(f"{model}: internal error ({type(exc).__name__}); details in the server log",
                          triton_code(pb, exc) if code is None else code)


def fault(pb, model: str, exc: BaseException, code=None):
    """fault_error() as a response."""
    return pb.InferenceResponse(error=fault_error(pb, model, exc, code))


def guarded(pb, model: str):
    """Decorate execute(): an exception escaping it (a bug of ours) answers every request of the call with
    fault() instead of the stub's traceback."""
    def wrap(execute):
        @functools.wraps(execute)
        def run(self, requests):
            try:
                return execute(self, requests)
            except Exception as exc:
                error = fault_error(pb, model, exc)
                return [pb.InferenceResponse(error=error) for _ in requests]
        return run
    return wrap
