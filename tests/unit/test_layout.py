"""The package's layout rules: no import cycle between modules, the product never imports the lab (perf/),
the wheel holds the product only, every study reachable through one runner."""

import ast
import importlib
import re
import subprocess
import sys
import tomllib

from hotpath import paths
from perf.studies import STUDIES


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


def test_the_build_and_the_gateway_do_not_import_perf():
    graph = import_graph()
    for module in graph:
        if module.startswith(("hotpath.gateway", "hotpath.monitoring", "hotpath.exporters", "hotpath.server",
                              "hotpath.runtime", "hotpath.tensorrt")):
            assert not [t for t in graph[module] if t.startswith("hotpath.perf")], module


def lab_references(tree: ast.Module) -> list[str]:
    """What a module names of the lab: imports of `perf` / `perf.*`, and module paths in strings
    (importlib.import_module("perf.studies..."), uvicorn's "perf.compare...:create_app")."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "perf"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == "perf":
            found.append(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and re.fullmatch(r"perf\.(compare|studies)(\.\w+)*(:\w+)?", node.value):
            found.append(node.value)
    return found


def test_lab_reference_finder_finds_planted_references():
    tree = ast.parse("import perf\nfrom perf.compare import x\nimport importlib\nimportlib.import_module('perf.studies.soak')\n"
                     "from hotpath.perf import run\nprint('perf.md')\n")
    assert lab_references(tree) == ["perf", "perf.compare", "perf.studies.soak"]


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
    assert "hotpath" in packages and "hotpath.perf.measure" in packages
    assert not [p for p in packages if p.split(".")[0] != "hotpath" or {"compare", "studies"} & set(p.split("."))]


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


def test_the_old_spellings_say_where_the_lab_went():
    """`hotpath study`, `hotpath perf --compare` and `hotpath tune --vs-model-analyzer` name the lab's command."""
    for old, new in ((["study", "soak"], "python -m perf study NAME"), (["perf", "--compare"], "python -m perf compare"),
                     (["tune", "text_embedding", "--vs-model-analyzer"], "python -m perf tune ENDPOINT")):
        run = _lab("hotpath", *old)
        assert run.returncode == 2 and f"`{new}`" in run.stderr and len(run.stderr.splitlines()) == 1, run.stderr
    assert _lab("perf", "compare", "--help").returncode == 0 and _lab("perf", "tune", "--help").returncode == 0
