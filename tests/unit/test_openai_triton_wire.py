"""The API's bare embedding call: the request Triton reads and the answer it writes, both ways."""

import numpy as np
from tritonclient.grpc import service_pb2
from tritonclient.utils import deserialize_bytes_tensor

from hotpath.openai_api.triton import embedding_request, output_array

TEXTS = ["reset password", "", "日本語のテキスト 🙂", "a" * 5000, "naïve\u200bcafé"]


def test_embedding_request_carries_every_text_as_a_bytes_row():
    request = embedding_request("text_embedding", TEXTS)
    assert request.model_name == "text_embedding"
    (tensor,) = request.inputs
    assert (tensor.name, tensor.datatype, list(tensor.shape)) == ("TEXT", "BYTES", [len(TEXTS), 1])
    assert [o.name for o in request.outputs] == ["EMBEDDING"]
    decoded = deserialize_bytes_tensor(request.raw_input_contents[0])
    assert [v.decode("utf-8") for v in decoded] == TEXTS


def _response(**outputs) -> service_pb2.ModelInferResponse:
    response = service_pb2.ModelInferResponse(model_name="text_embedding")
    for name, array in outputs.items():
        response.outputs.add(name=name, datatype={np.float32: "FP32", np.float16: "FP16"}[array.dtype.type],
                             shape=list(array.shape))
        response.raw_output_contents.append(array.tobytes())
    return response


def test_output_array_reads_the_named_output_in_its_dtype_and_shape():
    vectors = np.random.default_rng(0).standard_normal((3, 384)).astype(np.float32)
    other = np.ones((3, 2), dtype=np.float16)
    got = output_array(_response(OTHER=other, EMBEDDING=vectors), "EMBEDDING")
    assert got.dtype == np.float32 and got.shape == (3, 384)
    np.testing.assert_array_equal(got, vectors)
    assert output_array(_response(OTHER=other), "EMBEDDING") is None
    assert output_array(service_pb2.ModelInferResponse(), "EMBEDDING") is None
