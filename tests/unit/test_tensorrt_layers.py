"""hotpath.tensorrt is one home in two layers and a build calls down, never back up: the repository build ->
hotpath.tensorrt.plans (specs -> recipes, plan configs, plans) -> the core (recipe, manifest, compat, inventory,
device, builder, parity, startup). A spec without a `[hotpath.tensorrt]` table never enters the TensorRT code."""

import sys

import pytest

from hotpath import repository_build
from tests.unit.test_layout import import_graph

BUILD = "hotpath.tensorrt.plans"
ENTRY_POINTS = ("hotpath.repository_build", "hotpath.cli")   # the only modules that enter the build layer
# Above the core: the build layer, the specs and their settings, the repository build and the CLI.
ABOVE_CORE = (BUILD, "hotpath.specs.spec", "hotpath.specs.build_options", "hotpath.specs.config_pbtxt", "hotpath.exporters", *ENTRY_POINTS)


def _in(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _core(module: str) -> bool:
    return _in(module, ("hotpath.tensorrt",)) and not _in(module, (BUILD,))


def test_the_core_never_imports_the_layers_above_it():
    graph = import_graph()
    core = [m for m in graph if _core(m)]
    assert "hotpath.tensorrt.startup" in core and "hotpath.tensorrt.manifest" in core
    for module in core:
        assert not [t for t in graph[module] if _in(t, ABOVE_CORE)], module


def test_the_build_layer_never_imports_the_repository_build_or_the_cli():
    graph = import_graph()
    build = [m for m in graph if _in(m, (BUILD,))]
    assert f"{BUILD}.step" in build and f"{BUILD}.options" in build
    for module in build:
        assert not [t for t in graph[module] if _in(t, ENTRY_POINTS)], module
    # Within the layer: what reads a spec's table never imports the step or the audit that use it.
    for module in (f"{BUILD}.options", f"{BUILD}.feeders", f"{BUILD}.profiles", f"{BUILD}.plan_config"):
        assert not [t for t in graph[module] if t in (f"{BUILD}.step", f"{BUILD}.audit")], module


def test_only_the_entry_points_enter_the_build_layer():
    graph = import_graph()
    for module, targets in graph.items():
        if not _in(module, (BUILD,)) and [t for t in targets if _in(t, (BUILD,))]:
            assert module in ENTRY_POINTS, module


@pytest.fixture
def no_tensorrt(monkeypatch):
    """hotpath.tensorrt cannot be imported (any import of it raises), and the exporters are not run."""
    for name in [m for m in sys.modules if _in(m, ("hotpath.tensorrt",))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "hotpath.tensorrt", None)
    monkeypatch.setattr(repository_build, "_run_exporter", lambda spec, out_dir, force: ("skipped", {}))


def test_a_spec_without_a_tensorrt_table_never_enters_the_tensorrt_code(no_tensorrt, tmp_path):
    from hotpath import paths
    from hotpath.specs.spec import load_specs

    specs = load_specs(paths.model_specs_dir(), paths.ensemble_specs_dir())
    without = [s.name for s in specs if s.hotpath.tensorrt is None]
    assert "image_classifier" in without and "tokenizer" in without   # an ONNX model and a Python one
    results = repository_build.build_repository(tmp_path, only=without)
    assert [r.model for r in results] == sorted(without)
    assert (tmp_path / "image_classifier" / "config.pbtxt").is_file()
    assert not (tmp_path / "image_classifier" / "configs").exists()


def test_a_spec_with_a_tensorrt_table_does_enter_it(no_tensorrt, tmp_path):
    # The check above can fail: text_encoder asks for plans, so its build imports hotpath.tensorrt.
    with pytest.raises(ImportError, match="hotpath.tensorrt"):
        repository_build.build_repository(tmp_path, only=["text_encoder"])
