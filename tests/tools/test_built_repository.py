"""What reads the built repository without starting a server: the container entrypoint's startup checks
and the tritonserver command line it would exec, staging (the onnxruntime runner swapped in, tuned
values applied) and the cold-start study's copy without warmup. Each asks for `built_repository`
(tests/conftest.py), which builds what is missing."""

import os
import subprocess
import sys

from hotpath import paths
from hotpath.server.staging import stage_repository
from hotpath.server.tracing import OtlpTracing
from hotpath.specs.repository import read_config
from hotpath.tuning import tuned_values
from hotpath.tuning.hardware_key import HardwareKey
from hotpath.tuning.tuned_values import TunedValues
from perf.lab.studies.cold_start import without_warmup


def _entrypoint_args(repository, tmp_path, env: dict) -> list[str]:
    """The tritonserver command line docker/entrypoint.sh would exec, captured by a stand-in binary."""
    fake = tmp_path / "tritonserver"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    run_env = {**os.environ, "TRITONSERVER": str(fake), "PYTHON": sys.executable, "HOTPATH_ADMIN_KEY": "k",
               "MODEL_REPOSITORY": str(repository), "HOTPATH_CACHE_DIR": str(tmp_path / "cache"), **env}
    out = subprocess.run(["bash", str(paths.ROOT / "docker" / "entrypoint.sh")], env=run_env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_container_flag_passes_the_same_trace_flags_as_hotpath_serve(built_repository, tmp_path):
    url = "collector.observability:4318/v1/traces"
    args = _entrypoint_args(built_repository, tmp_path, {"HOTPATH_TRACE_OTLP_URL": url, "HOTPATH_TRACE_RATE": "50"})
    flags = OtlpTracing(url, rate=50).flags()
    assert [a for a in args if a.startswith("--trace-config")] == flags
    assert "--metrics-config=summary_latencies=true" in args


def test_container_traces_nothing_by_default(built_repository, tmp_path):
    args = _entrypoint_args(built_repository, tmp_path, {"HOTPATH_TRACE_OTLP_URL": ""})
    assert not [a for a in args if a.startswith("--trace-config")]
    assert "--metrics-config=summary_latencies=true" in args


def test_onnxruntime_models_are_substituted_in_the_staged_copy_only(built_repository, tmp_path):
    repo = built_repository
    before = {p: p.read_bytes() for p in repo.glob("*/config.pbtxt")}
    messages = []
    staged = stage_repository(repo, tmp_path / "staged", ort_threads=1, log=messages.append)

    assert {"text_encoder", "tokenizer", "text_embedding_exact", "text_embedding"} <= set(staged)
    encoder = read_config(tmp_path / "staged" / "text_encoder")
    assert encoder.backend == "python"
    assert encoder.parameters["intra_op_thread_count"].string_value == "1"
    assert all(g.kind == g.KIND_CPU for g in encoder.instance_group)
    runner = (tmp_path / "staged" / "text_encoder" / "1" / "model.py").read_text()
    assert "onnxruntime" in runner
    assert any("text_encoder: backend onnxruntime -> python" in m for m in messages)
    # untouched models are linked, and the repository itself is unchanged
    assert (tmp_path / "staged" / "tokenizer").is_symlink()
    assert {p: p.read_bytes() for p in repo.glob("*/config.pbtxt")} == before
    assert read_config(repo / "text_encoder").backend == "onnxruntime"


def test_staging_applies_matching_values_and_leaves_the_repository_alone(built_repository, tmp_path, monkeypatch):
    monkeypatch.setattr(tuned_values, "default_path", lambda container=False: tmp_path / "tuned.json")
    repo = built_repository
    committed = read_config(repo / "sentence_embedder")
    threads = committed.parameters["one_text_thread_count"].string_value
    new = "1" if threads != "1" else "2"
    TunedValues(HardwareKey.detect(), {"sentence_embedder": {"one_text_thread_count": int(new)}}, "now").save()
    lines: list[str] = []
    stage_repository(repo, tmp_path / "staged", log=lines.append)
    staged = read_config(tmp_path / "staged" / "sentence_embedder")
    assert staged.parameters["one_text_thread_count"].string_value == new
    assert (tmp_path / "staged" / "sentence_embedder" / "1").resolve() == (repo / "sentence_embedder" / "1").resolve()
    assert read_config(repo / "sentence_embedder").parameters["one_text_thread_count"].string_value == threads
    assert any("applying tuned values" in line for line in lines)
    # Measured on other hardware: the committed value is served and the log says so.
    other = HardwareKey("another CPU", ("avx2",), 64)
    TunedValues(other, {"sentence_embedder": {"one_text_thread_count": int(new)}}, "then").save()
    lines.clear()
    stage_repository(repo, tmp_path / "staged2", log=lines.append)
    staged = read_config(tmp_path / "staged2" / "sentence_embedder")
    assert staged.parameters["one_text_thread_count"].string_value == threads
    assert any("FOREIGN" in line for line in lines)


def test_without_warmup_drops_only_the_warmup(built_repository, tmp_path):
    repo = built_repository
    with_warmup = [m for m in ("text_encoder", "image_classifier") if read_config(repo / m).model_warmup]
    assert with_warmup, "the committed repository warms its ONNX models up"
    target = without_warmup(repo, tuple(with_warmup), tmp_path)
    for m in with_warmup:
        bare, original = read_config(target / m), read_config(repo / m)
        assert not bare.model_warmup
        original.ClearField("model_warmup")
        assert bare == original
        assert (target / m / "1").resolve() == (repo / m / "1").resolve()
