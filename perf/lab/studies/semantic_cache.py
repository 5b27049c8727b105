"""The semantic cache's threshold: hit and false-hit rates of text_embedding's cosine on prompt pairs.

Every pair of perf/data/semantic_pairs.jsonl (paraphrases: one answer serves both; near misses: mostly
the same words, another answer) is embedded by hotpath's own text_embedding endpoint (MiniLM-L6, the
vectors the semantic cache compares) on a local tritonserver (or `--url`). For each threshold t from
0.70 to 0.99: the hit rate (paraphrases with cosine >= t) and the false-hit rate (near misses with
cosine >= t), with 95% Wilson intervals. The default is the lowest t whose false-hit rate is below 1%.

    flock /tmp/hotpath-it.lock .venv/bin/python -m perf study semantic_cache [--url HOST:PORT]

writes perf/reports/semantic_cache.md (a part from NOTES_MARKER on is kept when it is rewritten).
"""

from __future__ import annotations

import datetime
import json
import math
import shlex
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hotpath import paths

PAIRS = paths.ROOT / "perf" / "data" / "semantic_pairs.jsonl"
REPORT = paths.ROOT / "perf" / "reports" / "semantic_cache.md"
THRESHOLDS = tuple(round(0.70 + 0.01 * i, 2) for i in range(30))   # 0.70 .. 0.99
FINE_THRESHOLDS = tuple(round(0.991 + 0.001 * i, 3) for i in range(10))   # 0.991 .. 1.000: where none above is
KIND_THRESHOLDS = (0.85, 0.90, 0.95, 0.99)
MAX_FALSE_HIT_RATE = 0.01   # the default threshold's false-hit rate is below 1%
Z95 = 1.959963984540054
NOTES_MARKER = "<!-- notes: kept when the report is regenerated -->"


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of k successes in n trials (95% by default); (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Rate:
    """k of n pairs at or above a threshold."""

    k: int
    n: int

    @property
    def value(self) -> float:
        return self.k / self.n if self.n else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.k, self.n)


@dataclass(frozen=True)
class Row:
    """One threshold: paraphrases it would answer from the cache (hits) and near misses it would (false hits)."""

    threshold: float
    hits: Rate
    false_hits: Rate


def rates(paraphrase_cos, near_miss_cos, thresholds=THRESHOLDS) -> list[Row]:
    """One Row per threshold (cosine >= t is a cache hit)."""
    para, near = np.asarray(paraphrase_cos, float), np.asarray(near_miss_cos, float)
    return [Row(t, Rate(int((para >= t).sum()), para.size), Rate(int((near >= t).sum()), near.size))
            for t in thresholds]


def chosen(rows: list[Row], max_false_hit_rate: float = MAX_FALSE_HIT_RATE) -> Row | None:
    """The lowest threshold whose false-hit rate is below `max_false_hit_rate`; None when no threshold's is."""
    below = [r for r in rows if r.false_hits.value < max_false_hit_rate]
    return min(below, key=lambda r: r.threshold) if below else None


def load_pairs(path: Path = PAIRS) -> list[dict]:
    """The pairs file's rows; each has a, b, label (paraphrase | near_miss), domain and kind."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    bad = [r for r in rows if r.get("label") not in ("paraphrase", "near_miss") or not r.get("a") or not r.get("b")]
    if bad:
        raise ValueError(f"{path}: {len(bad)} rows without a, b or a known label, e.g. {bad[0]}")
    return rows


def embed_all(url: str, texts: list[str]) -> np.ndarray:
    """text_embedding's vectors for `texts`, as the endpoint returns them."""
    from hotpath.client import EmbeddingClient

    with EmbeddingClient(url) as client:
        return client.embed(texts).astype(np.float64)


def pair_cosines(pairs: list[dict], vectors: dict[str, np.ndarray]) -> np.ndarray:
    return np.array([float(vectors[p["a"]] @ vectors[p["b"]]) for p in pairs])


def unrelated_cosines(pairs: list[dict], vectors: dict[str, np.ndarray]) -> np.ndarray:
    """Cosines of prompts from different domains (a of one pair, b of another): surely other requests."""
    a = np.stack([vectors[p["a"]] for p in pairs])
    b = np.stack([vectors[p["b"]] for p in pairs])
    domains = np.array([p["domain"] for p in pairs])
    return (a @ b.T)[domains[:, None] != domains[None, :]]


def host() -> str:
    from hotpath.tuning.hardware_key import HardwareKey

    key = HardwareKey.detect()
    return f"{key.cpu_model or 'unknown CPU'} (/proc/cpuinfo), {key.cores} usable cores" + (f", {key.gpu}" if key.gpu else "")


def _pct(rate: Rate) -> str:
    lo, hi = rate.interval
    return f"{100 * rate.value:.1f}% ({rate.k}/{rate.n}; {100 * lo:.1f}-{100 * hi:.1f})"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def report(pairs: list[dict], cos: np.ndarray, unrelated: np.ndarray, command: str, where: str) -> str:
    para = np.array([p["label"] == "paraphrase" for p in pairs])
    rows = rates(cos[para], cos[~para])
    pick = chosen(rows)
    fine = rates(cos[para], cos[~para], FINE_THRESHOLDS)
    fine_pick = None if pick else chosen(fine)
    shown = sorted({r.threshold for r in rows[::2]} | {rows[-1].threshold} | ({pick.threshold} if pick else set()))
    out = [
        "# Semantic cache: hit and false-hit rates by cosine threshold",
        "",
        f"- Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- Host: {host()}",
        f"- Command: `{command}`",
        f"- Embeddings: {where}, model text_embedding (MiniLM-L6, 384-dim, L2-normalized); cosine = dot product",
        f"- Corpus: `perf/data/semantic_pairs.jsonl` ({len(pairs)} pairs; written by `perf/data/make_semantic_pairs.py`)",
        "- A pair is a cache hit at threshold t when cos(a, b) >= t. Hit rate: paraphrase pairs that hit (higher is",
        "  better); false-hit rate: near-miss pairs that hit (each is a wrong answer served). Brackets: 95% Wilson",
        "  interval.",
        "",
        "## Chosen default",
        "",
    ]
    if pick:
        lo, hi = pick.false_hits.interval
        out.append(f"**{pick.threshold:.2f}**: the lowest threshold whose false-hit rate is below "
                   f"{100 * MAX_FALSE_HIT_RATE:.0f}%: false hits {_pct(pick.false_hits)}, hits {_pct(pick.hits)}. "
                   f"The interval's upper end is {100 * hi:.1f}%: with {pick.false_hits.n} near misses the data "
                   f"cannot show a rate below {100 * wilson(0, pick.false_hits.n)[1]:.1f}% even with none seen.")
    else:
        last = rows[-1]
        out.append(f"**None**: no threshold from {rows[0].threshold:.2f} to {last.threshold:.2f} has a false-hit rate "
                   f"below {100 * MAX_FALSE_HIT_RATE:.0f}% (at {last.threshold:.2f}: false hits {_pct(last.false_hits)}, "
                   f"hits {_pct(last.hits)}).")
        if fine_pick:
            out.append(f"In finer steps above the grid, the lowest below {100 * MAX_FALSE_HIT_RATE:.0f}% is "
                       f"**{fine_pick.threshold:.3f}**: false hits {_pct(fine_pick.false_hits)}, hits "
                       f"{_pct(fine_pick.hits)}.")
        else:
            out.append("Nor does any threshold in finer steps up to 1.000.")
        out += ["", "| threshold (finer, above the grid) | hit rate (paraphrases) | false-hit rate (near misses) |",
                "|---|---|---|"]
        out += [f"| {r.threshold:.3f} | {_pct(r.hits)} | {_pct(r.false_hits)} |" for r in fine]
    out += ["", "## Rates by threshold", "", "| threshold | hit rate (paraphrases) | false-hit rate (near misses) |",
            "|---|---|---|"]
    for r in rows:
        if r.threshold in shown:
            mark = " **(default)**" if pick and r.threshold == pick.threshold else ""
            out.append(f"| {r.threshold:.2f}{mark} | {_pct(r.hits)} | {_pct(r.false_hits)} |")
    kinds = sorted({p.get("kind", "") for p in pairs if p["label"] == "near_miss"})
    out += ["", "## False-hit rate by near-miss kind", "",
            "| kind | pairs | " + " | ".join(f"cos >= {t:.2f}" for t in KIND_THRESHOLDS) + " |",
            "|---|---|" + "---|" * len(KIND_THRESHOLDS)]
    for kind in kinds:
        c = cos[[p["label"] == "near_miss" and p.get("kind", "") == kind for p in pairs]]
        out.append(f"| {kind} | {c.size} | " + " | ".join(f"{100 * (c >= t).mean():.0f}%" for t in KIND_THRESHOLDS) + " |")
    out += ["", "## Cosine by label and kind", "", "| label | kind | pairs | min | median | max |", "|---|---|---|---|---|---|"]
    groups = sorted({(p["label"], p.get("kind", "")) for p in pairs})
    for label, kind in groups:
        c = cos[[p["label"] == label and p.get("kind", "") == kind for p in pairs]]
        out.append(f"| {label} | {kind} | {c.size} | {c.min():.3f} | {np.median(c):.3f} | {c.max():.3f} |")
    para_median = float(np.median(cos[para]))
    above = int((cos[~para] >= para_median).sum())
    out += ["", f"Near misses scoring at or above the median paraphrase ({para_median:.3f}): {above} of {(~para).sum()}.",
            f"Unrelated prompts (a and b of different pairs in different domains, {unrelated.size} pairs): median "
            f"{np.median(unrelated):.3f}, 99.9th percentile {np.percentile(unrelated, 99.9):.3f}, max {unrelated.max():.3f}."]
    out += ["", "## Corpus", "", "| domain | paraphrase | near_miss |", "|---|---|---|"]
    counts = Counter((p["domain"], p["label"]) for p in pairs)
    for d in sorted({p["domain"] for p in pairs}):
        out.append(f"| {d} | {counts[d, 'paraphrase']} | {counts[d, 'near_miss']} |")
    out.append(f"| all | {int(para.sum())} | {int((~para).sum())} |")
    order = np.argsort(-cos)
    t = pick.threshold if pick else fine_pick.threshold if fine_pick else FINE_THRESHOLDS[-1]
    out += ["", f"## Near misses by cosine, highest first (those at or above {t:g} are false hits)", "",
            "| cosine | kind | domain | a | b |", "|---|---|---|---|---|"]
    false_hits = int((cos[~para] >= t).sum())
    for i in [i for i in order if not para[i]][:min(max(20, false_hits), 40)]:
        p = pairs[i]
        out.append(f"| {cos[i]:.3f} | {p.get('kind', '')} | {p['domain']} | {_md(p['a'])} | {_md(p['b'])} |")
    out += ["", f"## Paraphrases by cosine, lowest first (those below {t:g} miss the cache)", "",
            "| cosine | kind | domain | a | b |", "|---|---|---|---|---|"]
    for i in [i for i in order[::-1] if para[i]][:15]:
        p = pairs[i]
        out.append(f"| {cos[i]:.3f} | {p.get('kind', '')} | {p['domain']} | {_md(p['a'])} | {_md(p['b'])} |")
    return "\n".join(out) + "\n"


def kept_notes(path: Path) -> str:
    """The hand-written end of an existing report (from NOTES_MARKER on), carried over unchanged."""
    old = path.read_text() if path.exists() else ""
    at = old.find(NOTES_MARKER)
    return "" if at < 0 else "\n" + old[at:]


def main(argv: list[str] | None = None) -> int:
    from perf.lab.studies.runner import parser

    ap = parser("semantic_cache", __doc__, allow_busy=False)   # cosines do not depend on the host's load
    ap.add_argument("--url", help="gRPC HOST:PORT of a running server with text_embedding (default: start one)")
    ap.add_argument("--pairs", type=Path, default=PAIRS)
    ap.add_argument("--out", type=Path, default=REPORT)
    args = ap.parse_args(argv)
    pairs = load_pairs(args.pairs)
    texts = list(dict.fromkeys(t for p in pairs for t in (p["a"], p["b"])))
    if args.url:
        matrix, where = embed_all(args.url, texts), f"tritonserver at {args.url}"
    else:
        from hotpath.server.local_triton import LocalTriton
        from hotpath.server.ports import ServerPorts, free_ports
        from hotpath.server.subset import linked

        http, grpc, metrics = free_ports(3)
        repo = linked(("text_embedding", "sentence_embedder"))
        with LocalTriton(repository=repo, ports=ServerPorts(http=http, grpc=grpc, metrics=metrics)) as server:
            matrix = embed_all(server.grpc_url, texts)
        where = "a local tritonserver on the built model_repository/ (text_embedding + sentence_embedder)"
    norms = np.linalg.norm(matrix, axis=1)
    where += f"; {len(texts)} distinct prompts, vector norms {norms.min():.4f}-{norms.max():.4f}"
    vectors = dict(zip(texts, matrix / norms[:, None]))   # already unit length: a cosine either way
    cos = pair_cosines(pairs, vectors)
    command = "flock /tmp/hotpath-it.lock .venv/bin/python -m perf study semantic_cache " + shlex.join(sys.argv[1:] if argv is None else argv)
    text = report(pairs, cos, unrelated_cosines(pairs, vectors), command.strip(), where)
    args.out.write_text(text + kept_notes(args.out))
    print(text)
    return 0

