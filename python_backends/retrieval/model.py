"""Retrieval: BYTES query in, the top-k documents of the store out; writes (upsert/delete) through the same model.

One process embeds and searches: text_embedding's tokenizer settings and encoder graph (the same
vectors), then the store chosen by the `store` parameter (hotpath.runtime.retrieval.open: the built HNSW index
with its write-ahead log, or Postgres + pgvector). Per `execute()`: every request is checked on its
own (hotpath.runtime.retrieval.requests); all texts to embed (queries and upserted documents) go through one
tokenizer call and one encoder call; the writes are applied in arrival order, one store write (one
fsync or one transaction) per collection, before any response is sent; then one search per collection
for all its queries. A bad request gets its own INVALID_ARGUMENT.

Collections (hotpath.runtime.retrieval.store): each request reads and writes the collection the gateway
named (hotpath.runtime.tenancy.collection_of: its tenant's, "shared" for an admin, "local" for a direct
call). Writes go to it alone; searches see it plus "shared" ("shared" alone for an admin). A request
whose collection or tenant parameter is malformed gets INVALID_ARGUMENT, alone. Usage per tenant
(hotpath.runtime.usage): documents_written (ids upserted or deleted) and embedding_tokens (the tokens of
its texts, from the one tokenizer call's attention mask).
"""

import numpy as np
import triton_python_backend_utils as pb_utils

from hotpath.runtime.backend_args import parameters, version_dir
from hotpath.runtime.backend_io import fault_error, guarded, input_array, invalid
from hotpath.runtime.embedder import EXPORT_DIR, Embedder
from hotpath.runtime.embedder import INPUTS as EMBED_INPUTS
from hotpath.runtime.lifetime import exit_with_server
from hotpath.runtime.parameters import RetrievalParameters
from hotpath.runtime.retrieval.open import data_dir_of, open_store
from hotpath.runtime.retrieval.requests import Limits, parse_request
from hotpath.runtime.retrieval.store import write_all
from hotpath.runtime.settings import work_folder
from hotpath.runtime.tenancy import TenancyError, collection_of, tenant_of
from hotpath.runtime.text import encode
from hotpath.runtime.timing import ExecuteLog, timed
from hotpath.runtime.usage import Usage

INPUTS = ("TEXT", "TOP_K", "OP", "ID")   # parse_request's order; None for an absent one (TEXT is required)


def _bytes(rows):
    return np.array([[s.encode("utf-8") for s in row] for row in rows], dtype=np.object_)


def _who(request, parsed):
    """(tenant, collection) of a request; a malformed parameter becomes the request's error."""
    try:
        return tenant_of(request), collection_of(request)
    except TenancyError as exc:
        if parsed.error is None:
            parsed.error = str(exc)
        return None, None


class TritonPythonModel:
    def initialize(self, args):
        exit_with_server()   # a crashed tritonserver leaves no orphan stub (hotpath.runtime.lifetime)
        self.execute_log = ExecuteLog.open(args)
        params = RetrievalParameters.parse(parameters(args))
        folder = version_dir(args)
        self.embedder = Embedder(folder, params)   # text_embedding's vectors, built the same way
        self.limits = Limits.from_params(params)
        self.store = open_store(params, data_dir_of(params, args["model_name"], work_folder()),
                                base_dir=folder / EXPORT_DIR)
        self.usage = Usage(pb_utils, args["model_name"], ("documents_written", "embedding_tokens"))

    def _embed(self, texts):
        """(vectors, tokens per text): Embedder.embed's two steps, so the attention mask is at hand."""
        if not texts:
            return np.zeros((0, self.store.dim), dtype=np.float32), np.zeros(0, dtype=np.int64)
        feeds = encode(self.embedder.tokenizer, texts)
        return self.embedder.runner.run({n: feeds[n] for n in EMBED_INPUTS}), feeds["attention_mask"].sum(axis=1)

    @timed
    @guarded(pb_utils, "retrieval")
    def execute(self, requests):
        parsed = [parse_request(*(input_array(pb_utils, r, n) for n in INPUTS), self.limits) for r in requests]
        who = [_who(r, p) for r, p in zip(requests, parsed)]
        good = [(p, t, c) for p, (t, c) in zip(parsed, who) if p.error is None]
        searches = [g for g in good if g[0].op == "search"]
        writes = [g for g in good if g[0].op != "search"]
        results, fault = {}, None
        try:
            texts = [t for p, _, _ in writes for t in p.texts] + [t for p, _, _ in searches for t in p.texts]
            vectors, tokens = self._embed(texts)
            at, by_collection = 0, {}   # collection -> [(request, its ops)], in arrival order
            for p, _, collection in writes:
                ops = []
                for i, doc_id in enumerate(p.ids):
                    if p.op == "upsert":
                        ops.append(("upsert", doc_id, p.texts[i], vectors[at]))
                        at += 1
                    else:
                        ops.append(("delete", doc_id, "", None))
                by_collection.setdefault(collection, []).append((p, ops))
            for collection, batch in by_collection.items():
                existed = write_all(self.store, [op for _, ops in batch for op in ops], collection)
                done = 0
                for p, ops in batch:
                    flags = existed[done:done + len(ops)]
                    done += len(ops)
                    docs = p.texts if p.op == "upsert" else [""] * len(p.ids)
                    results[id(p)] = ([[i] for i in p.ids], np.array(flags, dtype=np.float32)[:, None],
                                      [[d] for d in docs])
            rows, groups = {}, {}   # request -> its rows of `vectors`; collection -> its searches
            for p, _, collection in searches:
                rows[id(p)] = np.arange(at, at + len(p.texts))
                at += len(p.texts)
                groups.setdefault(collection, []).append(p)
            for collection, group in groups.items():
                k = max(p.k for p in group)
                hits = self.store.search(vectors[np.concatenate([rows[id(p)] for p in group])], k, collection)
                found = max(sum(1 for i in r if i) for r in hits.ids)   # what the store had; rows pad with ""
                row = 0
                for p in group:
                    n, width = len(p.texts), min(p.k, found)
                    results[id(p)] = ([r[:width] for r in hits.ids[row:row + n]], hits.scores[row:row + n, :width],
                                      [r[:width] for r in hits.documents[row:row + n]])
                    row += n
        except Exception as exc:  # a fault of ours or of the store, not an input's
            code = pb_utils.TritonError.UNAVAILABLE if isinstance(exc, ConnectionError) else pb_utils.TritonError.INTERNAL
            fault = fault_error(pb_utils, "retrieval", exc, code)
        else:
            self._count(writes + searches, tokens)
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

    def _count(self, done, tokens):
        """Usage per tenant of the requests answered: ids written, tokens embedded (texts in `done`'s order)."""
        written, embedded, at = {}, {}, 0
        for p, tenant, _ in done:
            if p.op != "search":
                written[tenant] = written.get(tenant, 0) + len(p.ids)
            n = len(p.texts)
            embedded[tenant] = embedded.get(tenant, 0) + int(tokens[at:at + n].sum())
            at += n
        for tenant, n in written.items():
            self.usage.add("documents_written", tenant, n)
        for tenant, n in embedded.items():
            self.usage.add("embedding_tokens", tenant, n)

    def finalize(self):
        self.usage.close()
        self.store.close()
