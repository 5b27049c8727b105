"""scripts/gpu_check.py run here in a child Python (a CPU host: the GPU stages skip), and its encoder port
against the built model_repository/text_encoder/1/model.onnx."""

import json
import subprocess
import sys

from hotpath.tensorrt import device

GPU_CHECK = device.__file__.rsplit("/hotpath/", 1)[0] + "/scripts/gpu_check.py"


def test_gpu_check_runs_here_with_the_gpu_stages_skipped(tmp_path):
    """As the GPU machine runs it: no tritonclient, no TensorRT; here also no GPU (nvidia-smi off PATH)."""
    out = tmp_path / "gpu_check.json"
    probe = ("import runpy, sys; sys.modules['tritonclient'] = None; sys.modules['tensorrt'] = None; "
             f"sys.argv = [{GPU_CHECK!r}, '--out', {str(out)!r}, '--data-dir', {str(tmp_path / 'none')!r}]; "
             f"runpy.run_path({GPU_CHECK!r}, run_name='__main__')")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                         env={"PATH": "/nonexistent", "HOME": str(tmp_path)})
    assert run.returncode == 0, run.stdout + run.stderr
    printed = json.loads(run.stdout)  # one JSON object is all it prints on stdout
    assert printed == json.loads(out.read_text())
    assert printed["gpu"] is False and printed["skipped_gpu_stages"] == list(printed["stages"])
    stages = printed["stages"]
    assert set(stages) == {"device", "compatibility", "parity_fp16_cuda", "latency_cuda"}
    assert all(s["status"] == "skipped" and s["why"] for s in stages.values())
    assert stages["device"]["why"].startswith("no GPU seen by nvidia-smi")
    assert "GPU stages skipped" in printed["note"]


def test_gpu_check_encoder_port_matches_the_exported_onnx(built_repository):
    """The plain-torch encoder gpu_check runs on CUDA is the model ONNX Runtime serves (FP32, CPU here)."""
    import runpy

    import numpy as np
    import torch

    onnx_path = str(built_repository / "text_encoder" / "1" / "model.onnx")
    import onnxruntime as ort
    from safetensors.torch import load_file

    from hotpath.exporters.sentence_encoder import minilm_dir, minilm_tokenizer, tokenizer_recipe
    from hotpath.runtime.text import encode

    check = runpy.run_path(GPU_CHECK)
    weights = load_file(str(minilm_dir() / "model.safetensors"))
    feeds = encode(minilm_tokenizer(tokenizer_recipe("tokenizer")),
                   ["hello world", "", "Низкая задержка важнее средней.", "emoji 🚀 " * 30])
    ref = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    with torch.inference_mode():
        got = check["minilm"](weights, *(torch.from_numpy(feeds[n]) for n in check["INPUTS"])).numpy()
    assert got.shape == ref.shape == (4, 384)
    assert float(np.abs(got - ref).max()) <= check["IMPLEMENTATION_ATOL"]
