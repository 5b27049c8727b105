"""perf_analyzer --input-data files for every endpoint and every step model, made from real data.

Endpoint payloads are real inputs (short texts, a ~100 KB JPEG photo); a step model's payload is
what the step before it produces for those inputs, so each model alone sees production-shaped data.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

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


def _write(name: str, entries: list[dict]) -> Path:
    path = generated_dir() / name
    path.write_text(json.dumps({"data": entries}))
    return path


def _encoder_payload() -> Path:
    from hotpath.exporters.sentence_encoder import minilm_dir
    from hotpath.runtime.text import encode, load_tokenizer

    tok = load_tokenizer(minilm_dir() / "tokenizer.json", 256, pad_to_multiple_of=16)
    entries = []
    for text in short_texts():
        enc = encode(tok, [text])
        entries.append({k: {"content": v[0].tolist(), "shape": [v.shape[1]]} for k, v in enc.items()})
    return _write("text_encoder.json", entries)


def _image_payload() -> Path:
    path = data_dir() / "image_jpeg.json"
    if not path.exists():
        path.write_text(json.dumps({"data": [{"IMAGE": bytes_entry(jpeg_photo())}]}))
    return path


def _classifier_payload() -> Path:
    from hotpath.runtime.images import preprocess

    pixels = preprocess(jpeg_photo())
    return _write("image_classifier.json", [{"PIXELS": {"content": pixels.reshape(-1).tolist(),
                                                        "shape": list(pixels.shape)}}])


_BUILDERS = {
    "text_embedding": lambda: data_dir() / "short_texts.json",
    "tokenizer": lambda: data_dir() / "short_texts.json",
    "text_encoder": _encoder_payload,
    "image_classification": _image_payload,
    "image_preprocess": _image_payload,
    "image_classifier": _classifier_payload,
}


def payload_for(model: str) -> Path:
    """The --input-data file for `model`, generated on first use."""
    try:
        return _BUILDERS[model]()
    except KeyError:
        raise HotpathError(f"no perf payload for model '{model}' (known: {', '.join(sorted(_BUILDERS))})") from None


