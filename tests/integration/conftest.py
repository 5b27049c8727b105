"""Real tritonservers on free loopback ports, serving the built repository.

`triton` (one per session) serves every model but text_generation: vLLM's load (~40 s) and RSS (~3.4 GB)
are paid only by tests that generate, through `generation_triton` (one per session, text_generation
alone, started on first use), with the test settings of GENERATION_TEST_PARAMETERS.
"""

import pytest

from hotpath.server.local_triton import LocalTriton
from hotpath.server.ports import ServerPorts, free_ports
from hotpath.server.subset import linked

GENERATION = "text_generation"
# float32 on every host (the greedy-parity tests compare with transformers in float32; bf16 is the default
# where the CPU has it); a KV space of ~1,400 float32 tokens so a few long streams preempt each other; blocks
# of 32 tokens so short chats' follow-up turns reuse cached blocks.
GENERATION_TEST_PARAMETERS = {"dtype": "float32", "kv_cache_mib": "64", "max_model_len": "1024", "block_size": "32"}


def generation_repository(target, built, **parameters):
    """`target` holding text_generation with its built files and its config's parameters overridden."""
    from hotpath.specs.config_pbtxt import parse_pbtxt, to_pbtxt

    model = target / GENERATION
    model.mkdir(parents=True)
    config = parse_pbtxt((built / GENERATION / "config.pbtxt").read_text())
    for key, value in parameters.items():
        config.parameters[key].string_value = str(value)
    (model / "config.pbtxt").write_text(to_pbtxt(config))
    (model / "1").symlink_to((built / GENERATION / "1").resolve(), target_is_directory=True)
    return target


def _serve(repository, **kwargs):
    http, grpc, metrics = free_ports(3)
    return LocalTriton(repository, ports=ServerPorts(http=http, grpc=grpc, metrics=metrics), **kwargs)


def all_but_generation(built, target=None):
    """Links to every built model but text_generation (vLLM: a load of 40 s to minutes and ~3 GB; the tests
    that need it have servers of their own)."""
    models = sorted(p.name for p in built.iterdir()
                    if p.is_dir() and p.name != GENERATION and (p / "config.pbtxt").is_file())
    return linked(models, target, built)


@pytest.fixture(scope="session")
def triton(built_repository, tmp_path_factory):
    server = _serve(all_but_generation(built_repository, tmp_path_factory.mktemp("repository")))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def generation_triton(built_repository, tmp_path_factory):
    server = _serve(generation_repository(tmp_path_factory.mktemp("generation"), built_repository,
                                          **GENERATION_TEST_PARAMETERS))
    server.start(timeout=600)   # vLLM: ~40 s on an idle 2-core host, minutes beside other loads
    yield server
    server.stop()


@pytest.fixture(scope="session")
def grpc_url(triton):
    return triton.grpc_url


@pytest.fixture(scope="session")
def generation_url(generation_triton):
    return generation_triton.grpc_url


@pytest.fixture(scope="module")
def chat_api(generation_triton):
    """The OpenAI-compatible API beside the session's text_generation server, one per test module."""
    from hotpath.openai_api.openai_server import OpenAIServer

    with OpenAIServer(generation_triton.grpc_url, free_ports(1)[0], generation_triton.repository) as server:
        yield server


@pytest.fixture(scope="module")
def chat_sdk(chat_api):
    """The official openai SDK on `chat_api`."""
    import openai

    with openai.OpenAI(base_url=chat_api.base_url, api_key="unused", max_retries=0) as client:
        yield client
