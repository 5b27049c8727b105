"""Retrieval: BYTES query in, the top-k documents of the store out; writes (upsert/delete) through the same model.

One process embeds and searches: text_embedding's tokenizer settings and encoder graph (the same
vectors), then the store chosen by the `store` parameter (hotpath.retrieval.open: the built HNSW index
with its write-ahead log, or Postgres + pgvector). Per `execute()`: every request is checked on its
own (hotpath.retrieval.requests); all texts to embed (queries and upserted documents) go through one
tokenizer call and one encoder call; the writes are applied in arrival order with one fsync before any
response is sent; then one search for every query. A bad request gets its own INVALID_ARGUMENT.
"""

import numpy as np
import triton_python_backend_utils as pb_utils

from hotpath import paths
from hotpath.retrieval.open import data_dir_of, open_store
from hotpath.retrieval.requests import Limits, parse_request
from hotpath.retrieval.store import write_all
from hotpath.runtime.backend_args import parameters, version_dir
from hotpath.runtime.backend_io import fault_error, guarded, input_array, invalid
from hotpath.runtime.embedder import EXPORT_DIR, Embedder
from hotpath.runtime.lifetime import exit_with_server
from hotpath.runtime.parameters import RetrievalParameters
from hotpath.runtime.timing import ExecuteLog, timed

INPUTS = ("TEXT", "TOP_K", "OP", "ID")   # parse_request's order; None for an absent one (TEXT is required)


def _bytes(rows):
    return np.array([[s.encode("utf-8") for s in row] for row in rows], dtype=np.object_)


class TritonPythonModel:
    def initialize(self, args):
        exit_with_server()   # a crashed tritonserver leaves no orphan stub (hotpath.runtime.lifetime)
        self.execute_log = ExecuteLog.open(args)
        params = RetrievalParameters.parse(parameters(args))
        folder = version_dir(args)
        self.embedder = Embedder(folder, params)   # text_embedding's vectors, built the same way
        self.limits = Limits.from_params(params)
        self.store = open_store(params, data_dir_of(params, args["model_name"], paths.work_dir()),
                                base_dir=folder / EXPORT_DIR)

    def _embed(self, texts):
        if not texts:
            return np.zeros((0, self.store.dim), dtype=np.float32)
        return self.embedder.embed(texts)

    @timed
    @guarded(pb_utils, "retrieval")
    def execute(self, requests):
        parsed = [parse_request(*(input_array(pb_utils, r, n) for n in INPUTS), self.limits) for r in requests]
        good = [p for p in parsed if p.error is None]
        searches = [p for p in good if p.op == "search"]
        writes = [p for p in good if p.op != "search"]
        results, fault = {}, None
        try:
            vectors = self._embed([t for p in writes for t in p.texts] + [t for p in searches for t in p.texts])
            at = 0
            ops = []
            for p in writes:
                for i, doc_id in enumerate(p.ids):
                    if p.op == "upsert":
                        ops.append(("upsert", doc_id, p.texts[i], vectors[at]))
                        at += 1
                    else:
                        ops.append(("delete", doc_id, "", None))
            existed = write_all(self.store, ops) if ops else []
            done = 0
            for p in writes:
                flags = existed[done:done + len(p.ids)]
                done += len(p.ids)
                docs = p.texts if p.op == "upsert" else [""] * len(p.ids)
                results[id(p)] = ([[i] for i in p.ids], np.array(flags, dtype=np.float32)[:, None], [[d] for d in docs])
            if searches:
                k = max(p.k for p in searches)
                hits = self.store.search(vectors[at:], k)
                found = max(sum(1 for i in r if i) for r in hits.ids)   # what the store had; rows pad with ""
                row = 0
                for p in searches:
                    n, width = len(p.texts), min(p.k, found)
                    results[id(p)] = ([r[:width] for r in hits.ids[row:row + n]], hits.scores[row:row + n, :width],
                                      [r[:width] for r in hits.documents[row:row + n]])
                    row += n
        except Exception as exc:  # a fault of ours or of the store, not an input's
            code = pb_utils.TritonError.UNAVAILABLE if isinstance(exc, ConnectionError) else pb_utils.TritonError.INTERNAL
            fault = fault_error(pb_utils, "retrieval", exc, code)
        responses = []
        for p in parsed:
            if p.error is not None:
                responses.append(invalid(pb_utils, "retrieval", p.error))
            elif fault is not None or id(p) not in results:
                responses.append(pb_utils.InferenceResponse(error=fault or pb_utils.TritonError("retrieval: no result")))
            else:
                ids, scores, docs = results[id(p)]
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("IDS", _bytes(ids)),
                    pb_utils.Tensor("SCORES", np.ascontiguousarray(scores, dtype=np.float32)),
                    pb_utils.Tensor("DOCUMENTS", _bytes(docs))]))
        return responses

    def finalize(self):
        self.store.close()
