"""hotpath.specs.repository: the one reader of config.pbtxt files, and the endpoints a client calls."""

import dataclasses

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from hotpath import paths
from hotpath.errors import HotpathError
from hotpath.specs.config_pbtxt import render, to_pbtxt, validate_all
from hotpath.specs.repository import ConfigError, Input, Repository, read_config
from hotpath.specs.spec import spec_from_dict

REAL = Repository(paths.model_repository())


def _python(name: str, inp: str, out: str, **fields) -> dict:
    return {"backend": "python", "max_batch_size": 8, "hotpath": {"kind": "python"},
            "input": [{"name": inp, "data_type": "TYPE_FP32", "dims": [4]}],
            "output": [{"name": out, "data_type": "TYPE_FP32", "dims": [4]}], **fields}


def _write_repository(root, cached: bool = True):
    """A repository written the way `hotpath build` writes one: specs -> validated configs -> render."""
    tables = {
        "a": _python("a", "X", "Y", instance_group=[{"kind": "KIND_CPU", "count": 3}]),
        "b": _python("b", "Y", "Z", instance_group=[{"kind": "KIND_CPU", "count": 2}, {"kind": "KIND_CPU", "count": 1}]),
        "solo": _python("solo", "X", "Y"),
        "pipe": {"platform": "ensemble", "max_batch_size": 8, "hotpath": {"kind": "ensemble"},
                 "response_cache": {"enable": cached},
                 "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [4]}],
                 "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]}],
                 "ensemble_scheduling": {"step": [
                     {"model_name": "a", "model_version": -1, "input_map": {"X": "IN"}, "output_map": {"Y": "mid"}},
                     {"model_name": "b", "model_version": -1, "input_map": {"Y": "mid"}, "output_map": {"Z": "OUT"}},
                 ]}},
    }
    specs = [spec_from_dict(table, name) for name, table in tables.items()]
    validate_all(specs)
    for spec in specs:
        (root / spec.name).mkdir()
        (root / spec.name / "config.pbtxt").write_text(render(spec))
    (root / "not_a_model").mkdir()   # no config.pbtxt: not a model, as for Triton
    return Repository(root)


def test_real_ensembles_steps_inputs_and_cache():
    exact = REAL.endpoint("text_embedding_exact")
    assert exact.steps == ("tokenizer", "text_encoder")
    assert exact.inputs == (Input("TEXT", "TYPE_STRING", (1,)),)
    assert exact.response_cache and exact.models == ("text_embedding_exact", "tokenizer", "text_encoder")
    image = REAL.endpoint("image_classification")
    assert image.steps == ("image_preprocess", "image_classifier")
    assert [i.name for i in image.inputs] == ["IMAGE"] and image.inputs[0].data_type == "TYPE_STRING"
    assert image.instances == tuple(max(1, sum(g.count for g in REAL.configs()[s].instance_group))
                                    for s in image.steps)


def test_real_client_facing_set_is_every_model_no_ensemble_calls():
    names = [e.name for e in REAL.endpoints()]
    steps = {s.model_name for c in REAL.configs().values() for s in c.ensemble_scheduling.step}
    assert names == sorted(names) and steps and not steps & set(names)
    assert set(names) | steps == set(REAL.configs())
    assert {"text_embedding", "text_embedding_exact", "image_classification", "text_generation"} <= set(names)
    assert "tokenizer" not in names and "image_classifier" not in names


def test_written_repository_endpoints_steps_and_models(tmp_path):
    repo = _write_repository(tmp_path)
    assert [d.name for d in repo.model_dirs()] == ["a", "b", "pipe", "solo"]
    assert set(repo.configs()) == {"a", "b", "pipe", "solo"}
    assert [e.name for e in repo.endpoints()] == ["pipe", "solo"]
    pipe, solo = repo.endpoint("pipe"), repo.endpoint("solo")
    assert pipe.steps == ("a", "b") and pipe.models == ("pipe", "a", "b")
    assert pipe.inputs == (Input("IN", "TYPE_FP32", (4,)),) and pipe.response_cache
    assert solo.steps == ("solo",) and solo.models == ("solo",) and not solo.response_cache
    assert repo.endpoint("a").steps == ("a",)   # a step may still be called directly
    with pytest.raises(dataclasses.FrozenInstanceError):
        pipe.steps = ()


def test_cache_off_is_read(tmp_path):
    assert not _write_repository(tmp_path, cached=False).endpoint("pipe").response_cache


def test_instance_counts_per_step(tmp_path):
    repo = _write_repository(tmp_path)
    # a: one group of 3; b: groups of 2 and 1; solo: no group (one instance, as Triton gives a CPU model).
    assert repo.endpoint("pipe").instances == (3, 3)
    assert repo.endpoint("a").instances == (3,)
    assert repo.endpoint("solo").instances == (1,)


def test_a_group_without_a_count_is_one_instance(tmp_path):
    # hotpath's specs always set a count; Triton reads a group without one as one instance.
    repo = _write_repository(tmp_path)
    config = repo.configs()["solo"]
    config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU)
    config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=4)
    (tmp_path / "solo" / "config.pbtxt").write_text(to_pbtxt(config))
    assert Repository(tmp_path).endpoint("solo").instances == (5,)


def test_malformed_config_names_the_model_and_file(tmp_path):
    repo = _write_repository(tmp_path)
    broken = tmp_path / "b" / "config.pbtxt"
    broken.write_text(broken.read_text().replace("max_batch_size", "max_batch_sise"))
    with pytest.raises(ConfigError) as raised:
        repo.configs()
    assert raised.value.model == "b" and raised.value.path == broken
    assert "model 'b'" in str(raised.value) and str(broken) in str(raised.value) and "max_batch_sise" in str(raised.value)
    with pytest.raises(ConfigError, match="model 'b'"):
        read_config(tmp_path / "b")


def test_unknown_model_and_missing_step_are_named(tmp_path):
    repo = _write_repository(tmp_path)
    with pytest.raises(HotpathError, match="no model 'nope'"):
        repo.endpoint("nope")
    (tmp_path / "a" / "config.pbtxt").unlink()
    with pytest.raises(HotpathError, match="pipe: ensemble step model.* a "):
        Repository(tmp_path).endpoint("pipe")


def test_custom_config_name_reads_configs_dir(tmp_path):
    repo = _write_repository(tmp_path)
    (tmp_path / "solo" / "configs").mkdir()
    (tmp_path / "solo" / "configs" / "tensorrt.pbtxt").write_text('name: "solo"\nbackend: "tensorrt"\n')
    assert read_config(tmp_path / "solo", "tensorrt").backend == "tensorrt"
    assert read_config(tmp_path / "solo").backend == "python" == repo.configs()["solo"].backend
