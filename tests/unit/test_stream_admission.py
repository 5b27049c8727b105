"""The stream admission's own checks (hotpath.gateway.streams), before /charge is asked."""

from tritonclient.grpc import service_pb2

from hotpath.gateway.streams import MAX_MODEL_NAME, malformed, requested_tokens


def _request(name: str = "text_generation", shape=(1,), sampling: bytes | None = None):
    request = service_pb2.ModelInferRequest(model_name=name)
    tensor = request.inputs.add(name="text_input", datatype="BYTES")
    tensor.shape.extend(shape)
    if sampling is not None:
        params = request.inputs.add(name="sampling_parameters", datatype="BYTES")
        params.shape.append(1)
        params.contents.bytes_contents.append(sampling)
    return request


def test_a_model_name_too_long_to_ask_about_is_refused_as_invalid():
    assert malformed(_request("m" * MAX_MODEL_NAME)) is None
    for name in ("m" * (MAX_MODEL_NAME + 1), "é" * (MAX_MODEL_NAME // 2 + 1), "m" * 9220):
        code, message = malformed(_request(name))
        assert code == "INVALID_ARGUMENT" and str(MAX_MODEL_NAME) in message


def test_dimensions_outside_1_to_2_31_minus_1_are_refused():
    for shape in ((0,), (2**31,), (2**32 + 1,), (1, 0)):
        assert malformed(_request(shape=shape))[0] == "INVALID_ARGUMENT"
    assert malformed(_request(shape=(2**31 - 1,))) is None


def test_requested_tokens_reads_only_a_positive_integer_max_tokens_and_n_up_to_8():
    assert requested_tokens(_request(sampling=b'{"max_tokens": 7}')) == (7, 1)
    for bad in (b'{"max_tokens": "7"}', b'{"max_tokens": true}', b'{"max_tokens": -1}', b"[1]", b"{", b"\xff"):
        assert requested_tokens(_request(sampling=bad)) == (0, 1)
    assert requested_tokens(_request()) == (0, 1)
    # n is read without max_tokens too: the model's default is then charged for every choice
    assert requested_tokens(_request(sampling=b'{"n": 3}')) == (0, 3)
    assert requested_tokens(_request(sampling=b'{"max_tokens": 5, "n": 40}')) == (5, 8)
    for bad_n in (b'{"n": true}', b'{"n": "3"}', b'{"n": 0}', b'{"n": -2}', b'{"n": 2.5}'):
        assert requested_tokens(_request(sampling=bad_n))[1] == 1
