"""`python -m hotpath.health`: exit 0 only if every endpoint answers a real request.

Readiness (default): every endpoint must answer OK. Liveness (`--liveness`): the server must be live
and no endpoint may fail with a fault (INTERNAL, e.g. a dead stub) or time out (a hung one); an
endpoint refusing work because it is overloaded (UNAVAILABLE / RESOURCE_EXHAUSTED from a live server)
is alive: restarting a busy pod would only move its load onto the others.
Used by the container's HEALTHCHECK and the Kubernetes readiness/liveness exec probes:
    python3 -m hotpath.health --url 127.0.0.1:8001 --repository /models [--liveness]
"""

from __future__ import annotations

import argparse
import sys

from hotpath import settings
from hotpath.health.probe import endpoint_configs, probe_all, server_live
from hotpath.specs.repository import Repository


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hotpath.health", description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=f"127.0.0.1:{settings.container_grpc_port()}",
                        help="gRPC address of the server (default 127.0.0.1:$GRPC_PORT or :8001)")
    parser.add_argument("--repository", default=settings.container_repository(),
                        help="the model repository the server runs (endpoints are read from its configs)")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per endpoint (default 5)")
    parser.add_argument("--quiet", action="store_true", help="print failures only")
    parser.add_argument("--liveness", action="store_true",
                        help="tolerate overload refusals from a live server; fail on faults and timeouts")
    args = parser.parse_args(argv)
    configs = endpoint_configs(Repository(args.repository))
    if not configs:
        print(f"no endpoints found in {args.repository}", file=sys.stderr)
        return 2
    if args.liveness and not server_live(args.url, args.timeout):
        print(f"{args.url}: server not live", file=sys.stderr)
        return 1
    results = probe_all(args.url, configs, args.timeout)
    passed = [r.ok or (args.liveness and r.overloaded) for r in results]
    for result, ok in zip(results, passed):
        if not (args.quiet and ok):
            print(result.line(), file=sys.stdout if ok else sys.stderr)
    return 0 if all(passed) else 1


if __name__ == "__main__":
    sys.exit(main())
