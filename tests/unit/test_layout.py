"""The package's layout rules: no import cycle between modules, every study reachable through one runner."""

import ast
import importlib
import subprocess
import sys

from hotpath import paths
from hotpath.perf.studies import STUDIES


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
        if module.startswith(("hotpath.plans", "hotpath.gateway", "hotpath.monitoring", "hotpath.exporters",
                              "hotpath.server", "hotpath.runtime", "hotpath.tensorrt")):
            assert not [t for t in graph[module] if t.startswith("hotpath.perf")], module


def test_every_study_runs_through_the_runner():
    for name, (module, what) in STUDIES.items():
        mod = importlib.import_module(module)
        assert callable(getattr(mod, "main", None)) and what, name
        source = (paths.ROOT / (module.replace(".", "/") + ".py")).read_text()
        assert '__name__ == "__main__"' not in source, f"{module}: run it as `hotpath study {name}`"
    assert not list((paths.ROOT / "perf").glob("*.py")), "perf/ holds data, SLOs and reports; studies live in hotpath"


def test_study_cli_lists_and_runs_help():
    listed = subprocess.run([sys.executable, "-m", "hotpath", "study"], capture_output=True, text=True, cwd=paths.ROOT)
    assert listed.returncode == 0 and set(STUDIES) <= {line.split()[0] for line in listed.stdout.splitlines()}
    helped = subprocess.run([sys.executable, "-m", "hotpath", "study", "precision", "--help"], capture_output=True,
                            text=True, cwd=paths.ROOT)
    assert helped.returncode == 0 and "hotpath study precision" in helped.stdout
    unknown = subprocess.run([sys.executable, "-m", "hotpath", "study", "nope"], capture_output=True, text=True,
                             cwd=paths.ROOT)
    assert unknown.returncode == 1 and "no study 'nope'" in unknown.stderr
