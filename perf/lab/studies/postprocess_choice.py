"""Measure where image_classification's postprocess (softmax, top-5, labels) should run.

(a) in the classifier graph: extra ORT time = full graph - logits-only graph, in-process;
(b) a Python-backend step: perf_analyzer on that step alone at concurrency 1 (its server-side
    latency is what an extra ensemble hop would add, before ensemble scheduling overhead).
Triton's classification extension is not a candidate: clients request it per call
(`class_count`), and an ensemble cannot expose it as fixed LABELS/SCORES/CLASS_IDS outputs.

    .venv/bin/python -m perf study postprocess_choice   # writes perf/reports/image_postprocess_choice.md
"""

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import onnx
from tritonclient.grpc import model_config_pb2 as mc

from hotpath import paths
from hotpath.exporters.image_classifier import parity_batch
from hotpath.runtime.ort_session import make_session
from hotpath.server.admin import perf_analyzer_flags
from hotpath.server.local_triton import LocalTriton
from hotpath.server.ports import ServerPorts, free_ports
from hotpath.specs.config_pbtxt import to_pbtxt
from hotpath.sweeps.measure.perf_analyzer import perf_analyzer_binary, run_perf_analyzer

HERE = paths.ROOT / "perf"


def in_graph_cost(repeats: int = 200) -> tuple[float, float]:
    full = paths.model_repository() / "image_classifier" / "1" / "model.onnx"
    model = onnx.load(str(full))
    softmax_input = next(n.input[0] for n in model.graph.node if n.op_type == "Softmax")
    logits_only = Path(tempfile.mkdtemp()) / "logits.onnx"
    onnx.utils.extract_model(str(full), str(logits_only), ["PIXELS"], [softmax_input])
    feeds = {"PIXELS": parity_batch()[:1]}
    medians = []
    for path in (full, logits_only):
        session = make_session(path, 2, 1)
        for _ in range(10):
            session.run(None, feeds)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            session.run(None, feeds)
            times.append(time.perf_counter() - t0)
        medians.append(statistics.median(times) * 1e3)
    return medians[0], medians[1]


def python_step_cost() -> str:
    repo = Path(tempfile.mkdtemp()) / "repo"
    (repo / "topk_post" / "1").mkdir(parents=True)
    shutil.copy(HERE / "experiments" / "topk_post" / "model.py", repo / "topk_post" / "1" / "model.py")
    config = mc.ModelConfig(name="topk_post", backend="python", max_batch_size=16)
    config.input.add(name="LOGITS", data_type=mc.TYPE_FP32, dims=[1000])
    config.output.add(name="SCORES", data_type=mc.TYPE_FP32, dims=[5])
    config.output.add(name="CLASS_IDS", data_type=mc.TYPE_INT32, dims=[5])
    config.output.add(name="LABELS", data_type=mc.TYPE_STRING, dims=[5])
    config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
    (repo / "topk_post" / "config.pbtxt").write_text(to_pbtxt(config))
    http, grpc, metrics = free_ports(3)
    with LocalTriton(repo, ServerPorts(http, grpc, metrics)) as server:
        out = run_perf_analyzer([str(perf_analyzer_binary()), "-m", "topk_post", "-u", server.grpc_url, "-i", "grpc",
                                 "--concurrency-range", "1", "--percentile=95", "-s", "25",
                                 "--measurement-interval", "4000", *perf_analyzer_flags()], check=True)
    return "\n".join(line for line in out.stdout.splitlines()
                     if any(k in line for k in ("p50 latency", "p95 latency", "Avg request latency")))


def main(argv: list[str] | None = None) -> int:
    full_ms, logits_ms = in_graph_cost()
    python = python_step_cost()
    report = f"""# image_classification: where the postprocess runs

Measured by `perf/lab/studies/postprocess_choice.py` on this host ({os.cpu_count()} CPUs), one image.

| option | added latency |
|---|---|
| (a) softmax + top-5 + label Gather in the ONNX graph | {full_ms - logits_ms:+.3f} ms (graph median {full_ms:.2f} ms vs logits-only {logits_ms:.2f} ms) |
| (b) Python-backend step (alone, perf_analyzer, concurrency 1) | see below; plus one more ensemble hop |
| (c) Triton classification extension | not applicable: requested per call, cannot be fixed ensemble outputs |

perf_analyzer on the Python step alone:
```
{python}
```

Chosen: (a). The in-graph cost is within noise of zero; a Python step costs a stub round trip.
"""
    out = HERE / "reports" / "image_postprocess_choice.md"
    out.write_text(report)
    print(report)
    return 0
