"""`hotpath build` is incremental: unchanged inputs do no export work; real changes do."""

import logging
import shutil

import onnx
import pytest

from hotpath import paths
from hotpath.errors import SpecError
from hotpath.repository_build import build_repository


@pytest.fixture()
def workspace(tmp_path, monkeypatch):
    specs = tmp_path / "build"
    shutil.copytree(paths.model_specs_dir(), specs)
    monkeypatch.setenv("HOTPATH_BUILD_DIR", str(specs))
    return tmp_path / "repo", specs


TEXT_MODELS = ["text_encoder", "tokenizer", "text_embedding_exact"]


def _actions(results):
    return {r.model: r.action for r in results}


def test_second_run_skips_and_only_export_inputs_trigger_a_rebuild(workspace, caplog):
    repo, specs = workspace
    caplog.set_level(logging.INFO, logger="hotpath")
    first = _actions(build_repository(repo, only=TEXT_MODELS))
    assert first == {"text_encoder": "built", "tokenizer": "built", "text_embedding_exact": "skipped"}
    onnx_path = repo / "text_encoder" / "1" / "model.onnx"
    onnx.checker.check_model(str(onnx_path))
    assert any("max abs diff" in m for m in caplog.messages), "the exporter's parity line, logged"
    mtime = onnx_path.stat().st_mtime_ns

    caplog.clear()
    second = _actions(build_repository(repo, only=TEXT_MODELS))
    assert set(second.values()) == {"unchanged"}
    assert any("skip export" in m for m in caplog.messages)
    assert onnx_path.stat().st_mtime_ns == mtime

    # A batching change rewrites the config but does not re-export.
    spec = specs / "text_encoder.toml"
    spec.write_text(spec.read_text().replace("max_queue_delay_microseconds = 1000",
                                             "max_queue_delay_microseconds = 2000"))
    third = _actions(build_repository(repo, only=TEXT_MODELS))
    assert third["text_encoder"] == "skipped"
    assert "max_queue_delay_microseconds: 2000" in (repo / "text_encoder" / "config.pbtxt").read_text()
    assert onnx_path.stat().st_mtime_ns == mtime

    # An export setting change re-exports.
    spec.write_text(spec.read_text().replace("parity_atol = 1e-4", "parity_atol = 2e-4"))
    fourth = _actions(build_repository(repo, only=["text_encoder"]))
    assert fourth == {"text_encoder": "built"}
    assert onnx_path.stat().st_mtime_ns != mtime


def test_broken_spec_fails_before_any_work(workspace):
    repo, specs = workspace
    spec = specs / "tokenizer.toml"
    spec.write_text(spec.read_text().replace('data_type = "TYPE_STRING"', 'data_type = "TYPE_TEXT"'))
    with pytest.raises(SpecError, match=r"model 'tokenizer', field 'input\[0\].data_type'"):
        build_repository(repo)
    assert not repo.exists()
