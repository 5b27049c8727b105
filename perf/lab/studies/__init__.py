"""Studies: measurements behind one report each in perf/reports/, run as `python -m perf study NAME [ARGS]`.

Each study is a module with `main(argv) -> int`; `perf.lab.studies.runner` is the one way in
(argument parser, SIGTERM handling, the quiet-host check). perf/ at the top keeps only data, SLOs
and reports.
"""

# name -> (module, what it measures). The comparisons with peers live in perf.lab.compare.
STUDIES: dict[str, tuple[str, str]] = {
    "cold_start": ("perf.lab.studies.cold_start", "process start to READY, model loads, warmup, first requests"),
    "decode": ("perf.lab.studies.decode", "JPEG decoders (Pillow draft vs libjpeg-turbo bindings) by source size"),
    "fixed_cost": ("perf.lab.studies.fixed_cost", "one request's phases and ORT thread/spin layouts, in process"),
    "fixed_cost_server": ("perf.lab.studies.fixed_cost_server", "text_embedding's step layouts through one server, interleaved"),
    "fairness": ("perf.lab.studies.fairness", "a small tenant's latency beside one saturating the replica"),
    "failover": ("perf.lab.studies.failover", "a replica SIGKILLed under load behind the gateway and the balancer"),
    "generation_compare": ("perf.lab.compare.generation", "text generation vs llama.cpp and transformers"),
    "generation_doors": ("perf.lab.compare.generation_doors", "text generation through every door and vLLM's own server"),
    "image_payload": ("perf.lab.studies.image_payload", "write a real-JPEG --input-data file for perf_analyzer"),
    "openai_api": ("perf.lab.compare.openai_api", "the OpenAI API's own cost, and /v1/embeddings vs infinity-emb"),
    "monitoring_snapshot": ("perf.lab.studies.monitoring_snapshot", "what the dashboards show under load"),
    "overload_gateway": ("perf.lab.studies.overload_gateway", "admission control at 1x and 2x capacity"),
    "postprocess_choice": ("perf.lab.studies.postprocess_choice", "where image postprocessing should run"),
    "precision": ("perf.lab.studies.precision", "FP32 vs INT8 per model: speed and the gates' figures"),
    "retrieval_ann": ("perf.lab.studies.retrieval_ann", "the ANN library for retrieval (faiss, hnswlib, usearch)"),
    "retrieval_compare": ("perf.lab.compare.retrieval", "retrieval vs pgvector, two hops and FastAPI"),
    "retrieval_latency": ("perf.lab.studies.retrieval_latency", "retrieval in one model vs its parts at c=1"),
    "semantic_cache": ("perf.lab.studies.semantic_cache", "paraphrase and near-miss prompt pairs: semantic cache hit / false-hit rates"),
    "slow_clients": ("perf.lab.studies.slow_clients", "a normal client beside 1,000 half-sent + 1,000 idle connections per door"),
    "soak": ("perf.lab.studies.soak", "every endpoint at a steady open-loop load for minutes"),
    "conversation_affinity": ("perf.lab.studies.conversation_affinity", "third-turn TTFT with and without the OpenAI door's conversation affinity"),
}
