"""The hardware a measurement was made on, as one comparable key (stdlib only: runs in the container too).

Tuned values fit the host they were measured on: CPU model, the vector/matrix features ONNX Runtime
picks kernels by (AVX2, AVX-512, AVX-512 BF16, AMX), the cores this process may use, and the GPU.
Two hosts with the same key are taken to want the same tuned values; any difference makes a tuned
result foreign (hotpath.tuning.tuned_values).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

# The CPU features that change which kernels run (and so what is fastest), in /proc/cpuinfo's spelling.
FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


@dataclass(frozen=True)
class HardwareKey:
    cpu_model: str
    features: tuple[str, ...]
    cores: int
    gpu: str = ""    # GPU names, comma-separated; "" when none is visible

    @property
    def digest(self) -> str:
        """12 hex digits naming this hardware (equal keys, equal digests)."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:12]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["features"] = list(self.features)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "HardwareKey":
        features = set(d.get("features", ()))   # in FEATURES' order, as detect() gives them
        return cls(str(d.get("cpu_model", "")), tuple(f for f in FEATURES if f in features), int(d.get("cores", 0)),
                   str(d.get("gpu", "")))

    def describe(self) -> str:
        return (f"{self.cpu_model or 'unknown CPU'}, {self.cores} cores, "
                f"{'/'.join(self.features) or 'no AVX2'}" + (f", GPU {self.gpu}" if self.gpu else ", no GPU"))

    def differences(self, other: "HardwareKey") -> list[str]:
        """What differs from `other`, one 'field: this vs other' per field."""
        return [f"{name}: {mine or '-'} vs {theirs or '-'}"
                for name, mine, theirs in (("cpu", self.cpu_model, other.cpu_model),
                                           ("features", "/".join(self.features), "/".join(other.features)),
                                           ("cores", str(self.cores), str(other.cores)),
                                           ("gpu", self.gpu, other.gpu))
                if mine != theirs]

    @classmethod
    def detect(cls, cpuinfo: str | None = None, cores: int | None = None, gpu: str | None = None) -> "HardwareKey":
        """This host's key (arguments override what is read, for tests)."""
        if cpuinfo is None:
            try:
                cpuinfo = Path("/proc/cpuinfo").read_text()
            except OSError:
                cpuinfo = ""
        model, flags = parse_cpuinfo(cpuinfo)
        return cls(model, tuple(f for f in FEATURES if f in flags),
                   cores if cores is not None else usable_cores(), gpu if gpu is not None else gpu_names())


def parse_cpuinfo(text: str) -> tuple[str, set[str]]:
    """(model name, flags) of the first processor in /proc/cpuinfo's text."""
    model, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = " ".join(value.split())
        elif key == "flags" and not flags:
            flags = set(value.split())
    return model, flags


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask; a container's cpuset), else the CPU count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def gpu_names() -> str:
    """The names of the visible NVIDIA GPUs (nvidia-smi), "" when there is none or no driver."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ""
    try:
        out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return ",".join(n.strip() for n in out.splitlines() if n.strip())


if __name__ == "__main__":   # `python -m hotpath.tuning.hardware_key`: this host's key
    key = HardwareKey.detect()
    print(json.dumps({"digest": key.digest, **key.to_dict()}, indent=1))
