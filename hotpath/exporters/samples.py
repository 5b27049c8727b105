"""Real inputs per model, as perf_analyzer --input-data files made from real data on first use.

Endpoint payloads are real inputs (short texts, a ~100 KB JPEG photo); a step model's payload is
what the step before it produces for those inputs, so each model alone sees production-shaped data.
perf measures with them and the TensorRT build calibrates and checks parity on them
(hotpath.tensorrt.plans.calibration), so they live outside the perf package.
"""

from __future__ import annotations

import base64
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
from tritonclient.utils import serialize_byte_tensor

from hotpath import paths
from hotpath.errors import HotpathError


def data_dir() -> Path:
    return paths.ROOT / "perf" / "data"


def generated_dir() -> Path:
    d = paths.work_dir() / "perf-data"
    d.mkdir(parents=True, exist_ok=True)
    return d


@dataclass(frozen=True)
class Payload:
    """One --input-data file: `make` returns its entries; without `make` the file is committed."""

    name: str
    make: Callable[[], list[dict]] | None = None
    folder: Callable[[], Path] = data_dir
    fresh: bool = False  # remade on every use: derived by code (a tokenizer setting) that may change

    @property
    def path(self) -> Path:
        return self.folder() / self.name

    def ensure(self) -> Path:
        """The file, written first when missing (or always when `fresh`)."""
        path = self.path
        if self.make is not None and (self.fresh or not path.exists()):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"data": self.make()}))
        if not path.exists():
            raise HotpathError(f"perf input file {_shown(path)} is missing")
        return path


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(paths.ROOT))
    except ValueError:
        return str(path)


def short_texts() -> list[str]:
    return [entry["TEXT"][0] for entry in json.loads((data_dir() / "short_texts.json").read_text())["data"]]


def jpeg_photo(size: int = 720, quality: int = 90) -> bytes:
    """scikit-image's astronaut photo as a size x size JPEG (~106 KB at 720, quality 90)."""
    import skimage.data
    from PIL import Image

    img = Image.fromarray(skimage.data.astronaut()).resize((size, size), Image.Resampling.BICUBIC)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def bytes_entry(data: bytes) -> dict:
    """One BYTES element for --input-data: perf_analyzer sends b64 content as the serialized tensor."""
    serialized = serialize_byte_tensor(np.array([data], dtype=np.object_)).item()
    return {"b64": base64.b64encode(serialized).decode(), "shape": [1]}


def encoder_entries() -> list[dict]:
    """The tokenizer step's output for each short text, padded as the tokenizer pads."""
    from hotpath.exporters.sentence_encoder import minilm_tokenizer, tokenizer_recipe
    from hotpath.runtime.text import encode

    tok = minilm_tokenizer(tokenizer_recipe("tokenizer"))
    entries = []
    for text in short_texts():
        enc = encode(tok, [text])
        entries.append({k: {"content": v[0].tolist(), "shape": [v.shape[1]]} for k, v in enc.items()})
    return entries


def image_entries() -> list[dict]:
    return [{"IMAGE": bytes_entry(jpeg_photo())}]


def pixel_entries() -> list[dict]:
    """The image_preprocess step's output for the photo."""
    from hotpath.runtime.images import preprocess

    pixels = preprocess(jpeg_photo())
    return [{"PIXELS": {"content": pixels.reshape(-1).tolist(), "shape": list(pixels.shape)}}]


TEXTS = Payload("short_texts.json")
IMAGE = Payload("image_jpeg.json", image_entries)

# model -> its input file: every endpoint and each of its steps.
PAYLOADS: dict[str, Payload] = {
    "text_embedding": TEXTS, "sentence_embedder": TEXTS,
    "text_embedding_exact": TEXTS, "tokenizer": TEXTS,
    "text_encoder": Payload("text_encoder.json", encoder_entries, generated_dir, fresh=True),
    "image_classification": IMAGE, "image_preprocess": IMAGE,
    "image_classifier": Payload("image_classifier.json", pixel_entries, generated_dir),
    "retrieval": TEXTS,
}


def payload_for(model: str) -> Path:
    """The --input-data file for `model` (an endpoint or one of its steps), generated on first use."""
    if model not in PAYLOADS:
        raise HotpathError(f"no perf payload for model '{model}' (known: {', '.join(sorted(PAYLOADS))})")
    return PAYLOADS[model].ensure()


def ensure_input(path: Path, owner: str = "") -> Path:
    """An input file named by a user (perf/slo.toml): generated when hotpath knows how, else one clear error."""
    path = Path(path)
    for payload in PAYLOADS.values():
        if payload.path.resolve() == path.resolve():
            return payload.ensure()
    if not path.exists():
        raise HotpathError(f"perf input file {_shown(path)} is missing{f' (input_data of {owner})' if owner else ''}")
    return path
