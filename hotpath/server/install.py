"""Finding the Triton install of the nvidia-pytriton wheel and the environment its Python stubs need."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from hotpath.errors import ServerError


@dataclass
class TritonInstall:
    """Where the nvidia-pytriton wheel keeps the server and its Python backend."""

    root: Path

    @classmethod
    def find(cls) -> "TritonInstall":
        try:
            import pytriton
        except ImportError:
            raise ServerError("nvidia-pytriton is not installed; run `make setup`") from None
        root = Path(pytriton.__file__).parent / "tritonserver"
        if not (root / "bin" / "tritonserver").exists():
            raise ServerError(f"no tritonserver binary under {root}")
        return cls(root)

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "tritonserver"

    @property
    def libs(self) -> Path:
        return self.root.parent.parent / "nvidia_pytriton.libs"

    @property
    def stub(self) -> Path:
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        return self.root / "python_backend_stubs" / version / "triton_python_backend_stub"


def server_environment(install: TritonInstall | None = None) -> dict[str, str]:
    """Environment for a tritonserver process whose Python stubs run this interpreter."""
    env = dict(os.environ)
    # The stub runs the first `python3` on PATH: make it this interpreter's environment.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    libdir = sysconfig.get_config_var("LIBDIR")
    libs = str((install or TritonInstall.find()).libs)
    # LIBDIR must come first, or the stub may load the system libpython against this stdlib.
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, libs, env.get("LD_LIBRARY_PATH", "")) if p)
    return env


def prepare_backend_dir(install: TritonInstall, target: Path) -> Path:
    """A backend directory holding the Python backend plus the stub for this interpreter."""
    python_dir = target / "python"
    stub = python_dir / "triton_python_backend_stub"
    if not install.stub.exists():
        raise ServerError(f"no Python backend stub for Python {sys.version_info.major}.{sys.version_info.minor} "
                          f"in {install.stub.parent.parent}")
    if not stub.exists() or stub.stat().st_size != install.stub.stat().st_size:
        shutil.copytree(install.root / "backends" / "python", python_dir, dirs_exist_ok=True)
        shutil.copy2(install.stub, stub)
    return target
