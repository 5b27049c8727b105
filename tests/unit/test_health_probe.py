"""The liveness probe's requests and the watchdog's reading of errors, without a server."""

import io

import numpy as np
import pytest
from PIL import Image
from tritonclient.grpc import model_config_pb2 as mc

from hotpath.health.probe import ProbeError, ProbeResult, endpoint_configs, probe_inputs
from hotpath.paths import model_repository
from hotpath.server.watchdog import models_named_unhealthy
from hotpath.specs.repository import Repository


@pytest.fixture(scope="module")
def configs():
    return Repository(model_repository()).configs()


def test_endpoints_are_the_models_no_ensemble_calls(configs):
    names = [c.name for c in endpoint_configs(Repository(model_repository()))]
    steps = {s.model_name for c in configs.values() for s in c.ensemble_scheduling.step}
    assert steps and not steps & set(names)
    assert set(names) | steps == set(configs)
    assert {"text_embedding", "text_embedding_exact", "image_classification", "text_generation"} <= set(names)


def test_probe_inputs_are_unique_valid_and_cheap(configs):
    text = configs["text_embedding"]
    first, second = probe_inputs(text), probe_inputs(text)
    assert first[0].shape() == [1, 1] and first[0].datatype() == "BYTES"
    assert first[0]._get_content() != second[0]._get_content(), "a repeated input would be a cache hit"
    (image,) = probe_inputs(configs["image_classification"], seed=3)
    raw = image._get_content()
    Image.open(io.BytesIO(raw[raw.index(b"\x89PNG"):])).verify()
    generation = {i.name(): i for i in probe_inputs(configs["text_generation"])}
    assert set(generation) == {"text_input", "sampling_parameters"}, "optional inputs stay out except one token"
    assert generation["sampling_parameters"]._get_content()[4:] == b'{"max_tokens": 1}'
    assert b"hotpath liveness probe" in generation["text_input"]._get_content()


def test_numeric_inputs_get_values_and_other_types_a_clear_error():
    config = mc.ModelConfig(name="m", max_batch_size=8, input=[mc.ModelInput(name="X", data_type=mc.TYPE_FP32, dims=[4]),
                                                               mc.ModelInput(name="I", data_type=mc.TYPE_INT64, dims=[2])])
    first, second = (np.frombuffer(probe_inputs(config)[0]._get_content(), np.float32) for _ in range(2))
    assert first.shape == (4,) and first[0] != second[0], "unique per call: the cache cannot answer"
    assert np.frombuffer(probe_inputs(config)[1]._get_content(), np.int64).tolist() == [0, 0]
    odd = mc.ModelConfig(name="m", max_batch_size=8, input=[mc.ModelInput(name="B", data_type=mc.TYPE_BF16, dims=[4])])
    with pytest.raises(ProbeError, match="m: the probe has no value for required input B"):
        probe_inputs(odd)


def test_the_watchdog_reads_which_model_a_dead_stub_belongs_to():
    results = [ProbeResult("text_embedding_exact", False, 1003, "StatusCode.INTERNAL",
                           "in ensemble 'text_embedding_exact', Stub process 'tokenizer_0_0' is not healthy."),
               ProbeResult("image_classification", False, 1002, "StatusCode.INTERNAL",
                           "Stub process 'image_preprocess_1_12' is not healthy."),
               ProbeResult("text_embedding", False, 5, "StatusCode.UNAVAILABLE", "Server exiting")]
    assert models_named_unhealthy(results) == {"tokenizer", "image_preprocess"}


def test_liveness_tolerates_overload_but_not_faults_or_timeouts():
    assert ProbeResult("e", False, 1, "StatusCode.UNAVAILABLE", "Exceeds maximum queue size").overloaded
    assert ProbeResult("e", False, 1, "StatusCode.RESOURCE_EXHAUSTED", "rate limit").overloaded
    assert not ProbeResult("e", False, 1, "StatusCode.INTERNAL", "Stub process 'x_0_0' is not healthy.").overloaded
    assert not ProbeResult("e", False, 5000, "DEADLINE_EXCEEDED", "no final response within 5.0s").overloaded


def test_liveness_fails_when_no_server_answers(capsys):
    from hotpath.health.__main__ import main
    from hotpath.server.ports import free_ports

    (port,) = free_ports(1)
    assert main(["--url", f"127.0.0.1:{port}", "--repository", str(model_repository()), "--liveness",
                 "--timeout", "1"]) == 1
    assert "server not live" in capsys.readouterr().err


def test_a_hung_endpoint_restarts_what_serves_it():
    # The watchdog restarts a hung endpoint's steps (hotpath.specs.repository's Endpoint.steps).
    repository = Repository(model_repository())
    assert repository.endpoint("text_embedding_exact").steps == ("tokenizer", "text_encoder")
    assert repository.endpoint("text_embedding").steps == ("sentence_embedder",)
    assert repository.endpoint("text_generation").steps == ("text_generation",)
