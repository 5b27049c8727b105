"""text_generation's engine settings, read from the model config's parameters (build/text_generation.toml).

Every key is checked (unknown keys, wrong types, out-of-range values are errors naming the key), at build
time by the exporter (`hotpath build` fails on a bad spec) and again when the model loads. Standard
library only: this runs in the Triton stub, in the build and (as JSON) in the engine process.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

from hotpath.runtime.parameters import ParameterError

DTYPES = ("auto", "float32", "bfloat16")
# bf16 is native where the CPU has AVX512-BF16 or AMX; elsewhere vLLM would emulate it (slower, and its
# greedy tokens drift from fp32: 4/8 prompts equal, measured), so fp32 is the default there.
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
MIB = 1 << 20


@dataclass(frozen=True)
class EngineSettings:
    dtype: str = "auto"               # auto: on CPU bfloat16 where native, else float32; on GPU vLLM's choice
    max_model_len: int = 2048         # tokens per sequence, prompt + generated
    max_num_seqs: int = 16            # sequences decoded together; beyond, requests wait in vLLM's queue
    max_queue: int = 32               # requests waiting beyond max_num_seqs; more are refused (UNAVAILABLE)
    kv_cache_mib: int = 1024          # KV cache space (vLLM kv_cache_memory_bytes)
    block_size: int = 128             # tokens per KV block (vLLM's CPU default; its kernel takes multiples of 32):
                                      # the prefix cache reuses whole blocks only
    enable_prefix_caching: bool = True
    enforce_eager: bool = True        # no torch.compile: its cache is not reused, so each load would pay it
    omp_threads_bind: str = "all"     # vLLM's VLLM_CPU_OMP_THREADS_BIND; "all": every CPU this process may use
    default_max_tokens: int = 128     # when sampling_parameters has no max_tokens
    max_tokens_limit: int = 512       # larger max_tokens are refused (INVALID_ARGUMENT)
    max_input_bytes: int = 65536      # text_input / messages larger than this are refused before tokenizing
    engine_python: str = ".venv-vllm/bin/python"   # the vLLM environment's interpreter (relative: to the repo)
    ready_timeout_s: int = 600

    def resolved_dtype(self, device: str = "cpu", cpu_flags: set[str] | None = None) -> tuple[str, str]:
        """(the dtype vLLM gets, why) for an engine on `device` ("cpu" | "cuda", engine_client.engine_device)."""
        if self.dtype != "auto":
            return self.dtype, "set in the spec's [parameters] dtype"
        if device != "cpu":
            # The CPU's flags say nothing of a GPU: vLLM's own "auto" takes the model's bf16 where the GPU
            # computes it (compute capability >= 8.0) and float16 below, as the field serves it.
            return "auto", "on GPU: vLLM's auto (the model's bfloat16 where compute capability >= 8.0, else float16)"
        flags = cpu_flags if cpu_flags is not None else cpu_feature_flags()
        native = [f for f in BF16_FLAGS if f in flags]
        if native:
            return "bfloat16", f"this CPU has {'/'.join(native)}: bf16 is native"
        return "float32", f"this CPU has no {'/'.join(BF16_FLAGS)}: bf16 would be emulated"

    def cpu_list(self) -> str:
        if self.omp_threads_bind != "all":
            return self.omp_threads_bind
        return ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))

    def as_dict(self) -> dict:
        return asdict(self)


FIELDS = EngineSettings.__dataclass_fields__
# Triton's own parameters and those other hotpath parts read (not the engine's).
IGNORED = {"EXECUTION_ENV_PATH", "restart"}


def _parse(key: str, text: str, kind):
    if kind is bool:
        if text.lower() not in ("true", "false", "1", "0"):
            raise ParameterError(key, f"must be true or false, got {text!r}")
        return text.lower() in ("true", "1")
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise ParameterError(key, f"must be an integer, got {text!r}") from None
    return text


def from_parameters(params: dict[str, str]) -> EngineSettings:
    """Settings from Triton parameters (string values); raises ParameterError naming the key."""
    values = {}
    for key, text in params.items():
        if key in IGNORED or key.startswith(("hotpath_", "hotpath.")):   # hotpath.restarted_at: the watchdog's reload
            continue
        if key not in FIELDS:
            raise ParameterError(key, f"unknown engine setting (known: {', '.join(sorted(FIELDS))})")
        kind = {"bool": bool, "int": int, "str": str}[FIELDS[key].type]
        values[key] = _parse(key, str(text), kind)
    s = EngineSettings(**values)
    if s.dtype not in DTYPES:
        raise ParameterError("dtype", f"must be one of {', '.join(DTYPES)}, got {s.dtype!r}")
    for key, low, high in (("max_model_len", 16, 1 << 20), ("max_num_seqs", 1, 4096), ("max_queue", 0, 1 << 16),
                           ("kv_cache_mib", 1, 1 << 20), ("default_max_tokens", 1, 1 << 20),
                           ("max_tokens_limit", 1, 1 << 20), ("max_input_bytes", 1, 1 << 26),
                           ("ready_timeout_s", 1, 3600)):
        if not low <= getattr(s, key) <= high:
            raise ParameterError(key, f"must be within {low}..{high}, got {getattr(s, key)}")
    if not (32 <= s.block_size <= 1024 and s.block_size % 32 == 0):
        raise ParameterError("block_size", f"must be a multiple of 32 within 32..1024, got {s.block_size}")
    if s.default_max_tokens > s.max_tokens_limit:
        raise ParameterError("default_max_tokens", f"exceeds max_tokens_limit ({s.max_tokens_limit})")
    if s.max_tokens_limit >= s.max_model_len:
        raise ParameterError("max_tokens_limit", f"must leave room for a prompt within max_model_len ({s.max_model_len})")
    if s.omp_threads_bind != "all" and not all(p.replace("-", "").isdigit() for p in s.omp_threads_bind.split(",")):
        raise ParameterError("omp_threads_bind", f"'all' or a CPU list like 0-1 or 0,2, got {s.omp_threads_bind!r}")
    return s


def engine_python(settings: EngineSettings, root: Path) -> Path:
    """The vLLM environment's interpreter: HOTPATH_VLLM_PYTHON, else the setting (relative to `root`)."""
    path = Path(os.environ.get("HOTPATH_VLLM_PYTHON") or settings.engine_python)
    return path if path.is_absolute() else root / path


def cpu_feature_flags() -> set[str]:
    """The CPU's feature flags (/proc/cpuinfo), empty where unknown."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()
