"""Test tiers by folder: tests/unit -> `unit` (no server, no external tool, no build step: `make test-fast`,
under a minute), tests/tools -> `tools` (nginx, Postgres, Redis, linters; exports and the built repository),
tests/integration -> `integration` (a real tritonserver). `pytest -m unit` etc. selects a tier; `make test`
runs all three."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TIERS = ("unit", "tools", "integration")
HERE = Path(__file__).parent
# A session that starts vLLM may spend its 600 s start-up budget (tests/integration/conftest.py) inside the
# first test that asks for it, on top of that test's own requests: more than the default timeout allows.
VLLM_FIXTURES = {"generation_triton": 1800}


@pytest.fixture(scope="session")
def built_repository():
    """model_repository/ with its build outputs (weights, exports, model.py copies): what the tools and
    integration tiers read."""
    from hotpath import paths  # here, not at the top: after HF_HUB_OFFLINE is set
    from hotpath.repository_build import build_repository

    build_repository()  # incremental: does nothing when `make engines` already ran
    return paths.model_repository()


def pytest_collection_modifyitems(items):
    for item in items:
        try:
            tier = Path(item.fspath).relative_to(HERE).parts[0]
        except ValueError:
            continue
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))
        limits = [VLLM_FIXTURES[f] for f in getattr(item, "fixturenames", ()) if f in VLLM_FIXTURES]
        if limits and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(max(limits)))


@pytest.fixture(scope="module")
def pg():
    """A Postgres + pgvector server of the test module's own (hotpath.retrieval.pgserver_local), removed after it."""
    from hotpath.retrieval.pgserver_local import LocalPostgres

    server = LocalPostgres()   # not under tmp_path: see LocalPostgres
    try:
        yield server.start()
    finally:
        server.remove()
