"""`python -m hotpath.health`: exit 0 only if every endpoint answers a real request.

Used by the container's HEALTHCHECK and the Kubernetes liveness/readiness exec probes:
    python3 -m hotpath.health --url 127.0.0.1:8001 --repository /models
"""

from __future__ import annotations

import argparse
import os
import sys

from hotpath.health.probe import endpoints, probe_all, read_configs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hotpath.health", description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=f"127.0.0.1:{os.environ.get('GRPC_PORT', '8001')}",
                        help="gRPC address of the server (default 127.0.0.1:$GRPC_PORT or :8001)")
    parser.add_argument("--repository", default=os.environ.get("MODEL_REPOSITORY", "/models"),
                        help="the model repository the server runs (endpoints are read from its configs)")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per endpoint (default 5)")
    parser.add_argument("--quiet", action="store_true", help="print failures only")
    args = parser.parse_args(argv)
    configs = endpoints(read_configs(args.repository))
    if not configs:
        print(f"no endpoints found in {args.repository}", file=sys.stderr)
        return 2
    results = probe_all(args.url, configs, args.timeout)
    for result in results:
        if not (args.quiet and result.ok):
            print(result.line(), file=sys.stdout if result.ok else sys.stderr)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
