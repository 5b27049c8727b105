"""The `hotpath` command line."""

from __future__ import annotations

import argparse
import logging
import sys
import time

from hotpath import logs, settings
from hotpath.errors import HotpathError

log = logging.getLogger(__name__)


def cmd_build(args: argparse.Namespace) -> int:
    """`hotpath build`: the whole repository, or `--check` its TensorRT plans."""
    from hotpath.repository_build import build_repository

    if args.check:
        return _check_plans(args)
    t0 = time.perf_counter()
    results = build_repository(args.repository, only=args.model or None, force=args.force)
    counts = {a: sum(r.action == a for r in results) for a in ("built", "skipped", "unchanged")}
    log.info(f"[build] done in {time.perf_counter() - t0:.1f}s: "
             + ", ".join(f"{n} {a}" for a, n in counts.items() if n))
    return 0


def _check_plans(args: argparse.Namespace) -> int:
    from pathlib import Path

    from hotpath import paths
    from hotpath.specs.spec import load_specs
    from hotpath.tensorrt import device
    from hotpath.tensorrt.compat import Target
    from hotpath.tensorrt.plans.audit import check_plans, format_report

    found = device.detect() if not (args.gpu or args.compute_capability) else Target()
    target = Target(args.gpu or found.gpu_name, args.compute_capability or found.compute_capability,
                    args.tensorrt or found.tensorrt_version)
    specs = [s for s in load_specs(paths.model_specs_dir()) if not args.model or s.name in args.model]
    statuses = check_plans(Path(args.repository or paths.model_repository()), specs, target)
    print(format_report(statuses, target))
    return 0 if all(s.ok for s in statuses) else 1


def cmd_serve(args: argparse.Namespace) -> int:
    from hotpath.server.ports import ServerPorts
    from hotpath.server.tracing import OtlpTracing
    from hotpath.stack.serve import serve_forever

    ports = ServerPorts(http=args.http_port, grpc=args.grpc_port, metrics=args.metrics_port)
    tracing = OtlpTracing(args.trace_otlp, args.trace_rate) if args.trace_otlp else None
    return serve_forever(ports, repository=args.repository, ort_threads=args.ort_threads, demo=args.demo,
                         tracing=tracing, watchdog=not args.no_watchdog, probe_s=args.probe_interval,
                         openai_port=args.openai_port, openai_aliases=args.openai_alias,
                         tenants=args.tenants)


def cmd_embed(args: argparse.Namespace) -> int:
    import numpy as np

    from hotpath.client import EmbeddingClient

    with EmbeddingClient(args.url, model=args.model) as client:
        vectors = client.embed(args.texts)
    if args.similarity:
        sims = vectors @ vectors.T
        width = max(len(t) for t in args.texts)
        for text, row in zip(args.texts, sims):
            print(f"{text[:40]:<{min(width, 40)}}  " + "  ".join(f"{v:6.3f}" for v in row))
    else:
        np.set_printoptions(precision=4, suppress=True, threshold=12, edgeitems=4)
        for text, vec in zip(args.texts, vectors):
            print(f"{text[:60]!r}: dim={vec.shape[0]} norm={np.linalg.norm(vec):.4f} {vec}")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from hotpath.client import RetrievalClient

    with RetrievalClient(args.url, model=args.model) as client:
        if args.delete:
            for doc_id, existed in zip(args.texts, client.delete(args.texts)):
                print(f"deleted {doc_id}" if existed else f"{doc_id}: no such document")
            return 0
        if args.upsert:
            existed = client.upsert([args.upsert], [" ".join(args.texts)])[0]
            print(f"{'replaced' if existed else 'added'} {args.upsert}")
            return 0
        for text, hits in zip(args.texts, client.search(args.texts, args.k)):
            print(text)
            for hit in hits:
                print(f"  {hit.score:6.3f}  {hit.id}  {hit.document[:100]}")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from hotpath.client import Generation, GenerationClient

    params = {k: v for k, v in (("max_tokens", args.max_tokens), ("temperature", args.temperature),
                                ("top_p", args.top_p), ("seed", args.seed), ("stop", args.stop)) if v is not None}
    with GenerationClient(args.url, model=args.model) as client:
        for event in client.stream(args.prompt, **params):
            if isinstance(event, Generation):
                print()
                tpot = ((event.total_s - event.ttft_s) / max(event.completion_tokens - 1, 1)
                        if event.ttft_s is not None else 0.0)
                print(f"[{event.finish_reason}; prompt {event.prompt_tokens} tokens, completion "
                      f"{event.completion_tokens}; first token {1000 * (event.ttft_s or 0):.0f} ms, "
                      f"then {1000 * tpot:.0f} ms/token]", file=sys.stderr)
            else:
                print(event.text, end="", flush=True)
    return 0


def cmd_classify(args: argparse.Namespace) -> int:
    from pathlib import Path

    from hotpath.client import ClassificationClient, ClientError

    with ClassificationClient(args.url, model=args.model) as client:
        failed = 0
        # One request per file, so one unreadable file does not hide the others' results.
        for name in args.files:
            try:
                result = client.classify([Path(name).read_bytes()])[0]
            except (OSError, ClientError) as exc:
                print(f"{name}: error: {exc}", file=sys.stderr)
                failed = max(failed, getattr(exc, "exit_code", 1))
                continue
            print(name)
            for label, score, cid in zip(result.labels, result.scores, result.class_ids):
                print(f"  {score:6.1%}  {label}  (class {cid})")
    return failed


def cmd_perf_check(args: argparse.Namespace) -> int:
    from hotpath.server.local_triton import server_url
    from hotpath.sweeps.gate import before_measuring, check, format_table
    from hotpath.tuning.slo import load_slos

    slos = load_slos(args.profile)
    selected = [slos[e] for e in (args.endpoint or sorted(slos))]
    quiet = before_measuring(selected, args.allow_busy)
    with server_url(args.url) as url:
        rows = check(url, selected)
    print(format_table(rows, quiet))
    missed = [r.slo.endpoint for r in rows if not r.ok]
    if missed:
        print(f"[perf-check] MISSED p95 target: {', '.join(missed)}", file=sys.stderr)
    return 1 if missed else 0


def cmd_tune(args: argparse.Namespace, rival=None) -> int:
    """`rival`: another searcher reported beside hotpath's (the lab's `python -m perf tune`)."""
    from hotpath.repository_build import build_repository
    from hotpath.server.local_triton import server_url
    from hotpath.sweeps.gate import before_measuring
    from hotpath.sweeps.tune.run import run_tune, write_winner
    from hotpath.tuning.slo import load_slos

    slos = load_slos(args.profile)
    if args.quick:
        return _tune_quick(args, slos)
    if not args.endpoint:
        raise HotpathError("name the endpoint to tune (or --quick: every endpoint, kept per host)")
    if args.endpoint not in slos:
        raise HotpathError(f"no SLO for endpoint '{args.endpoint}' in profile '{args.profile}'")
    before_measuring([slos[args.endpoint]], args.allow_busy)
    with server_url(args.url) as url:
        best, trials, record = run_tune(url, slos[args.endpoint], args.max_trials or 12, args.concurrency, args.threads,
                                        rival=rival)
    if args.no_write:
        return 0
    for line in write_winner(best, trials[0]):
        print(f"[tune] {line}")
    build_repository()
    print("[tune] specs updated and config.pbtxt files regenerated")
    return 0


def _tune_quick(args: argparse.Namespace, slos: dict) -> int:
    """`hotpath tune --quick [ENDPOINT]`: this host's tuned values (hotpath.sweeps.tune.quick), specs untouched."""
    from hotpath.server.local_triton import server_url
    from hotpath.sweeps.gate import before_measuring
    from hotpath.sweeps.tune.quick import QUICK_TRIALS, run_quick

    names = [args.endpoint] if args.endpoint else sorted(slos)
    unknown = [n for n in names if n not in slos]
    if unknown:
        raise HotpathError(f"no SLO for endpoint(s) {', '.join(unknown)} in profile '{args.profile}'")
    before_measuring([slos[n] for n in names], args.allow_busy)
    with server_url(args.url) as url:
        run_quick(url, [slos[n] for n in names], args.max_trials or QUICK_TRIALS, log=print)
    return 0


def cmd_perf(args: argparse.Namespace, beside=None) -> int:
    """`beside`: what the lab's `python -m perf compare` measures next to each sweep (hotpath.sweeps.run.Beside)."""
    from hotpath.server.local_triton import server_url
    from hotpath.sweeps.run import run_perf
    from hotpath.tuning.slo import load_slos

    if beside is None and args.alternative:
        print("hotpath perf: --alternative is the lab's (from a checkout: python -m perf compare)", file=sys.stderr)
        return 2
    slos = load_slos(args.profile)
    if args.explain:
        return _explain(args, slos)
    endpoints = args.endpoint or sorted(slos)
    from hotpath.sweeps.gate import before_measuring

    quiet = before_measuring([slos[e] for e in endpoints], args.allow_busy)
    with server_url(args.url) as url:
        run_perf(url, slos, endpoints, quick=args.quick, name=args.name, quiet=quiet, beside=beside)
    return 0


def _explain(args: argparse.Namespace, slos: dict) -> int:
    from hotpath.exporters.samples import payload_for
    from hotpath.server.local_triton import local_server
    from hotpath.sweeps.explain.breakdown import explain, format_breakdown, write_report
    from hotpath.sweeps.gate import before_measuring
    from hotpath.tuning.slo import Slo

    slo = slos.get(args.explain)
    if slo is None:  # an endpoint without a target of its own (text_embedding_exact): its registry payload
        slo = Slo(args.explain, float("inf"), 8, payload_for(args.explain))
    before_measuring([slo], args.allow_busy)
    concurrencies = sorted({1, slo.concurrency})
    with local_server(args.url, stub_timing=True) as server:
        url = args.url or server.grpc_url
        stub_dir = server.stub_timing_dir if server else None
        results = explain(url, args.explain, slo.input_data, concurrencies, stub_dir=stub_dir)
    print("\n".join(format_breakdown(results)))
    print(f"[explain] report: {write_report(results, name=args.name)}")
    return 0


def cmd_monitoring(args: argparse.Namespace) -> int:
    from hotpath.monitoring.__main__ import main as monitoring_main

    return monitoring_main(["--check"] if args.check else [])


def _allow_busy_flag(p: argparse.ArgumentParser) -> None:
    from hotpath.sweeps.measure.host_load import allow_busy_default

    p.add_argument("--allow-busy", action="store_true", default=allow_busy_default(),
                   help="measure even when other processes keep the CPU busy (env HOTPATH_ALLOW_BUSY=1)")


def _usage_arguments(p: argparse.ArgumentParser) -> None:
    from hotpath.monitoring.usage_report import add_arguments, cmd_usage

    add_arguments(p)
    p.set_defaults(func=lambda args, **_: cmd_usage(args))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hotpath", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("build",
                       help="build the repository: exports, copied Python models, config.pbtxt files and, on GPU "
                            "hosts, TensorRT plans (incremental; `make engines` runs it)",
                       description="Build the model repository from the specs: export and check every model, copy "
                                   "the Python models, write each config.pbtxt, and build TensorRT plans where "
                                   "TensorRT and a GPU are. Incremental.")
    p.add_argument("--repository", default=None, help="model repository (default: ./model_repository)")
    p.add_argument("--model", action="append", help="build only this model (repeatable)")
    p.add_argument("--force", action="store_true", help="rebuild even when inputs are unchanged")
    p.add_argument("--check", action="store_true",
                   help="build nothing; say which TensorRT plans are missing, stale or incompatible")
    p.add_argument("--gpu", default="", help="with --check: GPU name (default: this host's)")
    p.add_argument("--compute-capability", default="", help="with --check: e.g. 9.0 (default: this host's, "
                                                            "else every one the specs list)")
    p.add_argument("--tensorrt", default="", help="with --check: TensorRT version of the target runtime")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("serve", help="serve the repository with a local tritonserver until Ctrl-C")
    p.add_argument("--repository", default=None)
    p.add_argument("--http-port", type=int, default=settings.http_port())
    p.add_argument("--grpc-port", type=int, default=settings.grpc_port())
    p.add_argument("--metrics-port", type=int, default=settings.metrics_port())
    p.add_argument("--ort-threads", type=int, default=None,
                   help="override intra_op_thread_count of ONNX models in the staged copy")
    p.add_argument("--demo", action="store_true", help="send one real request once ready and print it")
    p.add_argument("--trace-otlp", metavar="URL", default=settings.trace_otlp_url(),
                   help="OpenTelemetry trace mode: export spans over OTLP/HTTP to URL (host:port/v1/traces)")
    p.add_argument("--trace-rate", type=int, default=settings.trace_rate(),
                   help="with --trace-otlp: trace one request in N (default 1000)")
    p.add_argument("--no-watchdog", action="store_true",
                   help="do not restart models whose Python stub died (default: watch and restart them)")
    p.add_argument("--probe-interval", type=float, default=5.0, metavar="S",
                   help="seconds between liveness probes through every endpoint (default 5)")
    p.add_argument("--openai-port", type=int, default=settings.openai_port(),
                   help="port of the OpenAI-compatible API, base URL http://127.0.0.1:PORT/v1 (default 8080; 0: none)")
    p.add_argument("--openai-alias", action="append", default=[], metavar="ALIAS=ENDPOINT",
                   help="another model name the OpenAI API accepts for an endpoint (repeatable)")
    p.add_argument("--tenants", metavar="FILE", default=None,
                   help="start the tenant gateway in front (the production shape) with this tenants file; its doors: "
                        f"gRPC :{settings.gateway_grpc_port()}, HTTP :{settings.gateway_http_port()}, "
                        f"OpenAI :{settings.gateway_openai_port()}")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("embed", help="embed texts through the text_embedding endpoint (gRPC)")
    p.add_argument("texts", nargs="+")
    p.add_argument("--url", default=settings.grpc_url())
    p.add_argument("--model", default="text_embedding")
    p.add_argument("--similarity", action="store_true", help="print the cosine similarity matrix")
    p.set_defaults(func=cmd_embed)

    p = sub.add_parser("search", help="top-k documents for texts from the retrieval endpoint (gRPC); "
                                      "--upsert ID / --delete write to its store")
    p.add_argument("texts", nargs="+", help="queries (with --upsert: the document; with --delete: ids)")
    p.add_argument("-k", type=int, default=None, help="results per query (default: the endpoint's default_k)")
    p.add_argument("--upsert", metavar="ID", default=None, help="store the text as document ID (add or replace)")
    p.add_argument("--delete", action="store_true", help="delete the documents whose ids are given")
    p.add_argument("--url", default=settings.grpc_url())
    p.add_argument("--model", default="retrieval")
    p.set_defaults(func=cmd_search)

    from hotpath.retrieval.admin import add_commands as add_retrieval_commands

    add_retrieval_commands(sub)   # `hotpath retrieval drop-collection NAME`, `hotpath retrieval collections`

    p = sub.add_parser("classify", help="top-5 ImageNet labels for image files (JPEG, PNG, WebP) over gRPC")
    p.add_argument("files", nargs="+")
    p.add_argument("--url", default=settings.grpc_url())
    p.add_argument("--model", default="image_classification")
    p.set_defaults(func=cmd_classify)

    p = sub.add_parser("generate", help="stream a chat reply from the text_generation endpoint (gRPC)")
    p.add_argument("prompt")
    p.add_argument("--max-tokens", type=int, default=None)
    p.add_argument("--temperature", type=float, default=None, help="0 (the default) is greedy")
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")
    p.add_argument("--url", default=settings.grpc_url())
    p.add_argument("--model", default="text_generation")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("perf", help="perf_analyzer sweeps of every endpoint and its steps; report in perf/reports/")
    p.add_argument("--profile", default=settings.perf_profile())
    p.add_argument("--endpoint", action="append", help="sweep only this endpoint (repeatable)")
    p.add_argument("--quick", action="store_true", help="smoke: two load points per endpoint, short windows")
    p.add_argument("--alternative", action="append", help=argparse.SUPPRESS)   # the lab's: python -m perf compare
    p.add_argument("--explain", metavar="ENDPOINT", default=None,
                   help="trace every request at concurrency 1 and the SLO's load; print where the time goes and "
                        "write perf/reports/explain-ENDPOINT.md with a timeline")
    p.add_argument("--name", default=None, help="report name (default: perf or perf-quick)")
    p.add_argument("--url", default=None)
    _allow_busy_flag(p)
    p.set_defaults(func=cmd_perf)

    p = sub.add_parser("perf-check", help="fail when an endpoint misses its p95 target at its declared load")
    p.add_argument("--profile", default=settings.perf_profile())
    p.add_argument("--endpoint", action="append", help="check only this endpoint (repeatable)")
    p.add_argument("--url", default=None, help="use a running server instead of starting one")
    _allow_busy_flag(p)
    p.set_defaults(func=cmd_perf_check)

    p = sub.add_parser("tune", help="tune an endpoint's models against its p95 target; write the winner into specs "
                                    "(--quick: minutes, every endpoint, kept per host)")
    p.add_argument("endpoint", nargs="?", help="the endpoint (with --quick: default every endpoint of the profile)")
    p.add_argument("--quick", action="store_true",
                   help="deploy-time tune: a short search per endpoint; the winner goes into this host's tuned "
                        "values (.hotpath/tuned.json, keyed to the hardware), not into the specs")
    p.add_argument("--profile", default=settings.perf_profile())
    p.add_argument("--max-trials", type=int, default=None,
                   help="measurements in all per endpoint, confirmations included (default 12; --quick: 5)")
    p.add_argument("--concurrency", type=lambda v: tuple(int(c) for c in v.split(",")), default=(2, 4, 8),
                   help="closed-loop sweep, comma-separated (the SLO's declared load is always added)")
    p.add_argument("--threads", type=int, default=None,
                   help="most busy threads over all steps (default: the cores, or what the start uses if more)")
    _allow_busy_flag(p)
    p.add_argument("--url", default=None, help="use a running server (started with explicit model control)")
    p.add_argument("--no-write", action="store_true", help="measure only; leave the specs alone")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("monitoring", help="regenerate monitoring/ (rules, dashboards) and deploy/'s generated files")
    p.add_argument("--check", action="store_true", help="fail when a generated file is stale; write nothing")
    p.set_defaults(func=cmd_monitoring)

    p = sub.add_parser("usage", help="what each tenant used (requests, tokens, images, documents written): from "
                                     "Prometheus over a window, or totals since start from metrics endpoints")
    _usage_arguments(p)
    return parser


def subcommand(name: str) -> argparse.ArgumentParser:
    """The parser of one subcommand (the lab's `python -m perf compare` and `tune` extend `perf` and `tune`)."""
    action, = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


def run(args: argparse.Namespace, prog: str = "hotpath", **hooks) -> int:
    """Run a parsed command: logging set up, a HotpathError as one line and its exit status."""
    logs.configure()
    try:
        return args.func(args, **hooks)
    except HotpathError as exc:
        print(f"{prog} {args.command}: error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 1)  # client errors: distinct statuses (bad input vs unavailable)
    except KeyboardInterrupt:
        return 130


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))
