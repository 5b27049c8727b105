"""python_backends/*/model.py without Triton: each adapter imported against a stand-in of
triton_python_backend_utils (tests/pb_stand_in.py), initialized from its model's committed config.pbtxt,
run on a small batch and compared with the library function it wraps; a bad request gets its own error.
Adapters that need built exports (sentence_embedder, retrieval, the runner on text_encoder) are in
tests/tools/test_built_adapters.py; text_generation (a vLLM child process) is tested through Triton, its Stream
(one request's response sender) here."""

import io
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from PIL import Image
from tritonclient.grpc import model_config_pb2 as mc

from hotpath import paths
from hotpath.exporters.sentence_encoder import minilm_dir
from hotpath.runtime.backend_args import parameters
from hotpath.runtime.images import PreprocessOptions, preprocess_request
from hotpath.runtime.text import encode, load_tokenizer
from hotpath.specs.repository import read_config
from tests.pb_stand_in import InferenceRequest as Request
from tests.pb_stand_in import (
    TritonError,
    TritonModelException,
    bytes_column,
    error_of,
    initialize_args,
    load_adapter,
    outputs,
)


def _committed(name: str):
    return read_config(paths.model_repository() / name)


# --------------------------------------------------------------------------------------------- tokenizer

def _tokenizer(tmp_path, monkeypatch):
    """The tokenizer adapter on its committed config, with the tokenizer.json the build copies beside it."""
    config = _committed("tokenizer")
    params = parameters(initialize_args(config, tmp_path))
    version = tmp_path / "tokenizer" / "1"
    version.mkdir(parents=True)
    shutil.copy(minilm_dir() / "tokenizer.json", version / params["tokenizer_file"])
    model = load_adapter("tokenizer", monkeypatch)()
    model.initialize(initialize_args(config, version))
    return model, params, version


def test_tokenizer_adapter_answers_each_request_with_its_slice_of_one_encode_batch(tmp_path, monkeypatch):
    model, params, version = _tokenizer(tmp_path, monkeypatch)
    texts = ["a short one", "a somewhat longer sentence about tokenizers and padding", "héllo 世界"]
    requests = [Request(TEXT=bytes_column(*texts[:2])), Request(TEXT=bytes_column(b"\xff\xfe")),
                Request(TEXT=bytes_column(texts[2]))]
    responses = model.execute(requests)

    reference = encode(load_tokenizer(version / params["tokenizer_file"], int(params["max_length"]),
                                      int(params["pad_to_multiple_of"])), texts)
    first, third = outputs(responses[0]), outputs(responses[2])
    for name in ("input_ids", "attention_mask", "token_type_ids"):
        np.testing.assert_array_equal(first[name], reference[name][:2])
        np.testing.assert_array_equal(third[name], reference[name][2:])
        assert first[name].dtype == np.int64 and first[name].shape[1] % int(params["pad_to_multiple_of"]) == 0
    code, message = error_of(responses[1])
    assert code == TritonError.INVALID_ARG and message.startswith("tokenizer: TEXT[0] is not valid UTF-8")


def test_tokenizer_adapter_refuses_a_missing_input_and_a_text_over_the_limit(tmp_path, monkeypatch):
    model, params, _ = _tokenizer(tmp_path, monkeypatch)
    too_long = "x" * (int(params["max_text_chars"]) + 1)
    missing, over, fine = model.execute([Request(), Request(TEXT=bytes_column(too_long)),
                                         Request(TEXT=bytes_column("fine"))])
    assert error_of(missing) == (TritonError.INVALID_ARG, "tokenizer: input TEXT is required (BYTES [batch, 1])")
    assert error_of(over)[0] == TritonError.INVALID_ARG and "over the limit" in error_of(over)[1]
    assert outputs(fine)["input_ids"].shape[0] == 1


# --------------------------------------------------------------------------------------------- image_preprocess

def _jpeg(width: int, height: int, seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


def test_image_preprocess_adapter_matches_preprocess_request_and_fails_a_corrupt_image_alone(tmp_path, monkeypatch):
    config = _committed("image_preprocess")
    model = load_adapter("image_preprocess", monkeypatch)()
    model.initialize(initialize_args(config, tmp_path / "image_preprocess" / "1"))
    p = parameters(initialize_args(config, tmp_path))
    options = PreprocessOptions(resize_shorter=int(p["resize_shorter"]), crop=int(p["crop"]),
                                max_pixels=int(p["max_pixels"]), max_bytes=int(p["max_bytes"]),
                                max_decoded_pixels=int(p["max_decoded_pixels"]),
                                fast_jpeg=p["fast_jpeg"].lower() in ("1", "true"))
    assert model.options == options   # the committed parameters reach the library, none dropped

    images = [bytes_column(_jpeg(320, 240, 0), _jpeg(500, 800, 1)), bytes_column(_jpeg(1024, 300, 2))]
    good = _jpeg(300, 300, 3)
    responses = model.execute([Request(IMAGE=images[0]), Request(IMAGE=bytes_column(good[:200])),
                               Request(IMAGE=images[1])])
    for response, image in zip((responses[0], responses[2]), images):
        pixels = outputs(response)["PIXELS"]
        np.testing.assert_array_equal(pixels, preprocess_request(image, options))
        assert pixels.dtype == np.uint8 and pixels.shape[1:] == (options.crop, options.crop, 3)
    code, message = error_of(responses[1])
    assert code == TritonError.INVALID_ARG and message.startswith("image_preprocess: IMAGE[0]")


# --------------------------------------------------------------------------------------------- onnxruntime_runner

def _affine_model(path, scale: float, shift: float) -> None:
    """Y = X * scale + shift, X and Y FP32 [batch, 4]."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["X", "scale"], ["scaled"]), helper.make_node("Add", ["scaled", "shift"], ["Y"])],
        "affine", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 4])],
        initializer=[helper.make_tensor("scale", TensorProto.FLOAT, [], [scale]),
                     helper.make_tensor("shift", TensorProto.FLOAT, [], [shift])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def _runner_config(input_type=mc.TYPE_FP32) -> mc.ModelConfig:
    """What staging makes of an onnxruntime-backend model: the runner in the Python backend, same tensors."""
    config = mc.ModelConfig(name="affine", backend="python", max_batch_size=8)
    config.input.add(name="X", data_type=input_type, dims=[4])
    config.output.add(name="Y", data_type=mc.TYPE_FP32, dims=[4])
    config.parameters["intra_op_thread_count"].string_value = "1"
    config.parameters["inter_op_thread_count"].string_value = "1"
    return config


def _runner(tmp_path, monkeypatch, scale: float, shift: float):
    """The runner adapter (not initialized) and the version folder of an affine model staged for it."""
    version = tmp_path / "affine" / "1"
    version.mkdir(parents=True)
    _affine_model(version / "model.onnx", scale=scale, shift=shift)
    return load_adapter("onnxruntime_runner", monkeypatch)(), version


def test_onnxruntime_runner_answers_each_request_with_its_rows_of_one_session_run(tmp_path, monkeypatch):
    model, version = _runner(tmp_path, monkeypatch, scale=2.0, shift=0.5)
    model.initialize(initialize_args(_runner_config(), version))
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((n, 4)).astype(np.float32) for n in (1, 3, 2)]
    responses = model.execute([Request(X=x) for x in batches])
    for response, x in zip(responses, batches):
        y = outputs(response)["Y"]
        np.testing.assert_allclose(y, x * 2.0 + 0.5, rtol=1e-6)
        assert y.dtype == np.float32 and y.flags.c_contiguous


def test_onnxruntime_runner_fails_what_the_session_refuses_and_serves_the_rest(tmp_path, monkeypatch):
    model, version = _runner(tmp_path, monkeypatch, scale=3.0, shift=0.0)
    model.initialize(initialize_args(_runner_config(), version))
    good = np.ones((2, 4), dtype=np.float32)
    bad, served = model.execute([Request(X=np.ones((1, 4), dtype=np.float64)), Request(X=good)])
    code, message = error_of(bad)
    assert code == TritonError.INTERNAL and message.startswith("onnxruntime: ")
    np.testing.assert_array_equal(outputs(served)["Y"], good * 3.0)


def test_onnxruntime_runner_refuses_a_string_input_at_initialize(tmp_path, monkeypatch):
    model, version = _runner(tmp_path, monkeypatch, scale=1.0, shift=0.0)
    with pytest.raises(TritonModelException, match=r"affine: TYPE_STRING input\(s\) \['X'\]"):
        model.initialize(initialize_args(_runner_config(mc.TYPE_STRING), version))


# --------------------------------------------------------------------------------------------- text_generation

class _Sender:
    """A decoupled response sender that fails the way tritonserver does: is_cancelled() while or after the final
    flag is sent reads a freed response factory (SIGSEGV in TRITONBACKEND_ResponseFactoryIsCancelled)."""

    def __init__(self):
        import threading

        self.final = False
        self.asking = threading.Event()     # set while is_cancelled() runs
        self.release = threading.Event()    # the test lets is_cancelled() return
        self.faults: list[str] = []

    def is_cancelled(self):
        if self.final:
            self.faults.append("is_cancelled after the final flag")
        self.asking.set()
        self.release.wait(5)
        if self.final:
            self.faults.append("final flag sent while is_cancelled ran")
        return False

    def send(self, response=None, flags=0):
        self.final = self.final or bool(flags)


def test_text_generation_never_asks_a_finished_stream_whether_it_was_cancelled(monkeypatch):
    """The watcher's cancellation check and the engine reader's last reply race: the check must finish before
    the final flag goes out, and a finished stream is never asked again."""
    import threading

    from hotpath.runtime.llm.request import Request as LLMRequest

    stream_class = load_adapter("text_generation", monkeypatch).execute.__globals__["Stream"]
    sender = _Sender()
    stream = stream_class(sender, LLMRequest(text="hi", messages=None, stream=True, exclude_input=True))
    watcher = threading.Thread(target=stream.cancelled)
    watcher.start()
    assert sender.asking.wait(5)
    last = threading.Thread(target=stream.reply, args=({"id": "r", "text": "", "tokens": 0, "finish": "stop",
                                                        "input_tokens": 1, "output_tokens": 1},))
    last.start()
    last.join(0.3)
    sender.release.set()
    watcher.join(5)
    last.join(5)
    assert sender.final, "the last reply was never sent"
    assert stream.cancelled() is False
    assert sender.faults == []


class _Engine:
    def __init__(self):
        self.closed = 0

    def close(self):
        self.closed += 1


def _idle_watcher(monkeypatch):
    """text_generation's model with only what its watcher reads: no streams, a stand-in engine."""
    import threading

    model_class = load_adapter("text_generation", monkeypatch)
    model = model_class.__new__(model_class)
    model.lock, model.streams, model.engine = threading.Lock(), {}, _Engine()
    model.strikes, model.idle_rounds, model.seen_served = 0, 0, False
    return model


def test_text_generation_stops_its_idle_engine_once_its_model_is_no_longer_served(monkeypatch):
    """An unload that never reaches finalize (Triton holding the model after cancelled streams) still ends the
    engine: idle, the watcher asks every IDLE_CHECK_ROUNDS-th round and closes the engine once not served."""
    model = _idle_watcher(monkeypatch)
    rounds = model._idle_round.__globals__["IDLE_CHECK_ROUNDS"]
    answers = iter([False, True, True, False])   # loading (not yet READY), served twice, then unloading
    asked = []

    def is_ready():
        asked.append(1)
        return next(answers)

    results = [model._watch_once(is_ready) for _ in range(4 * rounds)]
    assert len(asked) == 4, "asked once every IDLE_CHECK_ROUNDS rounds"
    assert results.index(True) == 4 * rounds - 1 and results.count(True) == 1
    assert model.engine.closed == 1


def test_text_generation_keeps_its_engine_while_its_model_was_never_served(monkeypatch):
    model = _idle_watcher(monkeypatch)
    rounds = model._idle_round.__globals__["IDLE_CHECK_ROUNDS"]
    assert not any(model._watch_once(lambda: False) for _ in range(3 * rounds))
    assert model.engine.closed == 0


class _Listening:
    def cancelled(self):
        return False

    def fail(self, message, code):
        self.failed = message


def test_text_generation_stops_its_engine_when_the_unload_began_while_it_was_busy(monkeypatch):
    """Served while busy (no idle check yet), then idle and unloading at the first idle check: the engine
    stops; busy and unloading: the streams end and the engine stops too."""
    model = _idle_watcher(monkeypatch)
    model.engine.abort = lambda rid: None
    rounds = model._idle_round.__globals__["IDLE_CHECK_ROUNDS"]
    model.streams = {"r": _Listening()}
    assert model._watch_once(lambda: True) is False and model.seen_served
    model.streams = {}
    results = [model._watch_once(lambda: False) for _ in range(rounds)]
    assert results == [False] * (rounds - 1) + [True] and model.engine.closed == 1
    busy = _idle_watcher(monkeypatch)
    busy.engine.abort = lambda rid: None
    stream = _Listening()
    busy.streams = {"r": stream}
    assert busy._watch_once(lambda: False) is True
    assert "unloaded" in stream.failed and busy.engine.closed == 1 and busy.streams == {}
