"""Studies: measurements behind one report each in perf/reports/, run as `hotpath study NAME [ARGS]`.

Each study is a module with `main(argv) -> int`; `hotpath.perf.studies.runner` is the one way in
(argument parser, SIGTERM handling, the quiet-host check). perf/ at the top keeps only data, SLOs
and reports.
"""

# name -> (module, what it measures). The comparisons with peers live in hotpath.perf.compare.
STUDIES: dict[str, tuple[str, str]] = {
    "cold_start": ("hotpath.perf.studies.cold_start", "process start to READY, model loads, warmup, first requests"),
    "decode": ("hotpath.perf.studies.decode", "JPEG decoders (Pillow draft vs libjpeg-turbo bindings) by source size"),
    "fixed_cost": ("hotpath.perf.explain.fixed_cost", "one request's phases and ORT thread/spin layouts, in process"),
    "fixed_cost_server": ("hotpath.perf.explain.fixed_cost_server", "text_embedding's step layouts through one server, interleaved"),
    "fairness": ("hotpath.perf.studies.fairness", "a small tenant's latency beside one saturating the replica"),
    "failover": ("hotpath.perf.studies.failover", "a replica SIGKILLed under load behind the gateway and the balancer"),
    "generation_compare": ("hotpath.perf.compare.generation", "text generation vs llama.cpp and transformers"),
    "image_payload": ("hotpath.perf.studies.image_payload", "write a real-JPEG --input-data file for perf_analyzer"),
    "openai_api": ("hotpath.perf.compare.openai_api", "the OpenAI API's own cost, and /v1/embeddings vs infinity-emb"),
    "monitoring_snapshot": ("hotpath.perf.studies.monitoring_snapshot", "what the dashboards show under load"),
    "overload_gateway": ("hotpath.perf.studies.overload_gateway", "admission control at 1x and 2x capacity"),
    "postprocess_choice": ("hotpath.perf.studies.postprocess_choice", "where image postprocessing should run"),
    "precision": ("hotpath.perf.studies.precision", "FP32 vs INT8 per model: speed and the gates' figures"),
    "retrieval_ann": ("hotpath.perf.studies.retrieval_ann", "the ANN library for retrieval (faiss, hnswlib, usearch)"),
    "retrieval_compare": ("hotpath.perf.compare.retrieval", "retrieval vs pgvector, two hops and FastAPI"),
    "retrieval_latency": ("hotpath.perf.studies.retrieval_latency", "retrieval in one model vs its parts at c=1"),
    "soak": ("hotpath.perf.studies.soak", "every endpoint at a steady open-loop load for minutes"),
}
