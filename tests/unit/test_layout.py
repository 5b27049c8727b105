"""The package's layout rules: no import cycle between modules, no arrow up the layers (LAYERS), the runtime
(what Triton's Python stubs import) imports nothing outside itself, the product never imports the lab
(perf/lab/), the wheel holds the product only, every study reachable through one runner."""

import ast
import importlib
import re
import subprocess
import sys
import tomllib

from hotpath import paths
from perf.lab.studies import STUDIES


def _module_names() -> dict[str, ast.Module]:
    out = {}
    for path in (paths.ROOT / "hotpath").rglob("*.py"):
        parts = list(path.relative_to(paths.ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = ast.parse(path.read_text())
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> hotpath modules it imports anywhere in its body (function-local imports included).

    `from pkg import name` counts as an edge to pkg.name when that is a module, else to pkg; importing a
    module's own parent package is not an edge (Python runs the parent's __init__ first anyway)."""
    modules = _module_names()
    graph = {m: set() for m in modules}
    for name, tree in modules.items():
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            for t in targets:
                if t in modules and t != name and not name.startswith(t + "."):
                    graph[name].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]; counter[0] += 1; stack.append(root); on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1; stack.append(w); on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop(); on.discard(w); comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_package():
    assert cycles(import_graph()) == []


# The package's layers, lowest first, in the order data flows (spec -> export -> repository -> server ->
# front door -> client -> perf report). A module imports its own layer and those below it, never above.
LAYERS = (
    ("runtime",),                                              # inside Triton's stubs: stdlib, numpy, pb_utils
    ("settings", "paths", "errors", "logs", "shutdown"),      # what every layer above reads
    ("specs", "health"),                                       # specs, config.pbtxt, the repository as read
    ("exporters", "tensorrt"),                                 # models exported into the repository
    ("repository_build",),                                     # `hotpath build`
    ("tuning",),                                               # SLOs, knobs, per-host tuned values
    ("server", "client"),                                      # the local tritonserver; the gRPC client
    ("retrieval", "nginx", "shared_state", "monitoring", "scaleout"),
    ("openai_api",),                                           # the OpenAI door, in front of Triton
    ("gateway",),                                              # the tenant gateway, in front of every door
    ("stack", "sweeps"),                                       # `hotpath serve`; sweeps and tuning runs
    ("cli", "__main__"),
)


def layer_of(module: str) -> int:
    """The layer of `hotpath.<part>...`; a part missing from LAYERS is an error (add it where it belongs)."""
    part = module.split(".")[1] if module.count(".") else "__init__"
    for i, parts in enumerate(LAYERS):
        if part in parts:
            return i
    raise AssertionError(f"{module}: hotpath.{part} has no layer in LAYERS")


def upward_arrows(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs where the imported module sits in a higher layer."""
    return sorted((m, t) for m, ts in graph.items() if m != "hotpath" for t in ts
                  if t != "hotpath" and layer_of(t) > layer_of(m))


def outside_runtime(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((m, t) for m, ts in graph.items() if m.startswith("hotpath.runtime")
                  for t in ts if not t.startswith("hotpath.runtime"))


def test_arrow_finders_find_planted_arrows():
    graph = {"hotpath.server.serve": {"hotpath.openai_api.openai_server", "hotpath.specs.repository"},
             "hotpath.runtime.timing": {"hotpath.settings"}, "hotpath.specs.repository": set()}
    assert upward_arrows(graph) == [("hotpath.runtime.timing", "hotpath.settings"),
                                    ("hotpath.server.serve", "hotpath.openai_api.openai_server")]
    assert outside_runtime(graph) == [("hotpath.runtime.timing", "hotpath.settings")]


def test_no_arrow_points_up():
    assert upward_arrows(import_graph()) == []


def test_the_runtime_imports_nothing_outside_it():
    """hotpath/runtime/ is what Triton's Python stubs import: it must run without the toolchain's modules."""
    assert outside_runtime(import_graph()) == []


def test_python_models_import_only_the_runtime():
    """python_backends/*/model.py are copied into the repository and run by the stubs."""
    for path in sorted((paths.ROOT / "python_backends").glob("*/model.py")):
        tree = ast.parse(path.read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
        outside = [n for n in names if n.split(".")[0] == "hotpath" and not n.startswith("hotpath.runtime")]
        assert outside == [], f"{path.parent.name}/model.py imports {outside}"


def lab_references(tree: ast.Module) -> list[str]:
    """What a module names of the lab: imports of `perf` / `perf.*`, and module paths in strings
    (importlib.import_module("perf.lab.studies..."), uvicorn's "perf.lab.compare...:create_app")."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "perf"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == "perf":
            found.append(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and re.fullmatch(r"perf\.lab(\.\w+)*(:\w+)?", node.value):
            found.append(node.value)
    return found


def test_lab_reference_finder_finds_planted_references():
    tree = ast.parse("import perf\nfrom perf.lab.compare import x\nimport importlib\nimportlib.import_module('perf.lab.studies.soak')\n"
                     "from hotpath.sweeps import run\nprint('perf.md')\n")
    assert lab_references(tree) == ["perf", "perf.lab.compare", "perf.lab.studies.soak"]


def test_the_product_never_imports_the_lab():
    """Data flows one way: perf/ (rival servers, studies) imports hotpath, never the reverse, so the installed
    package runs without the checkout's perf/ folder."""
    for name, tree in _module_names().items():
        assert not lab_references(tree), f"{name} imports the lab: {lab_references(tree)}"


def test_the_package_list_holds_no_lab_module():
    """What pyproject's package discovery puts in the wheel (tests/tools/test_wheel.py builds the real one)."""
    from setuptools import find_packages

    found = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = find_packages(str(paths.ROOT), include=found["include"])
    assert "hotpath" in packages and "hotpath.sweeps.measure" in packages
    assert not [p for p in packages if p.split(".")[0] != "hotpath" or {"lab", "compare", "studies"} & set(p.split("."))]


def test_every_study_runs_through_the_runner():
    for name, (module, what) in STUDIES.items():
        mod = importlib.import_module(module)
        assert callable(getattr(mod, "main", None)) and what, name
        source = (paths.ROOT / (module.replace(".", "/") + ".py")).read_text()
        assert '__name__ == "__main__"' not in source, f"{module}: run it as `python -m perf study {name}`"


def _lab(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, cwd=paths.ROOT)


def test_study_cli_lists_and_runs_help():
    listed = _lab("perf", "study")
    assert listed.returncode == 0 and set(STUDIES) <= {line.split()[0] for line in listed.stdout.splitlines()[2:]}
    helped = _lab("perf", "study", "precision", "--help")
    assert helped.returncode == 0 and "python -m perf study precision" in helped.stdout
    unknown = _lab("perf", "study", "nope")
    assert unknown.returncode == 1 and "no study 'nope'" in unknown.stderr


def test_no_two_test_files_share_a_name():
    """pytest imports test files by basename (no __init__.py in tests/): two of one name stop the whole run."""
    names = [p.name for p in (paths.ROOT / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
