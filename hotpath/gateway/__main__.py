"""`python -m hotpath.gateway token` prints a new tenant token; `python -m hotpath.gateway serve ...` runs the
tenant gateway on loopback in front of a tritonserver until Ctrl-C (limits sized as in hotpath.gateway.limits)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from hotpath.errors import HotpathError
from hotpath.gateway.config import TenantGatewaySettings
from hotpath.gateway.limits import admission_cap, max_body_bytes, stream_cap
from hotpath.gateway.local import LocalGateway
from hotpath.gateway.tenants import load_tenants, new_token


def _serve(args: argparse.Namespace) -> int:
    tenants = load_tenants(args.tenants)
    settings = TenantGatewaySettings(args.grpc_port, args.http_port, (args.grpc_upstream,), (args.http_upstream,),
                                     tenants, args.max_in_flight or admission_cap(args.profile),
                                     args.max_body_bytes or max_body_bytes(), args.max_streams or stream_cap())
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with LocalGateway(settings) as gateway:
        print(f"[gateway] gRPC {gateway.grpc_url}, HTTP {gateway.http_url} -> {args.grpc_upstream} / "
              f"{args.http_upstream}; {len(tenants)} tenant(s), {settings.in_flight_cap} inference calls in flight, "
              f"{settings.streams_cap} streams open, "
              f"bodies up to {settings.max_body_bytes} bytes; access log {gateway.access_log}", flush=True)
        try:
            while not stop.wait(0.5):
                if gateway.process.poll() is not None:
                    raise HotpathError(f"nginx exited with {gateway.process.returncode}")
        except KeyboardInterrupt:
            pass
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hotpath.gateway", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("token", help="print a new random tenant token")
    serve = sub.add_parser("serve", help="run the gateway until Ctrl-C")
    serve.add_argument("--tenants", required=True, help="tenants TOML file (hotpath.gateway.tenants)")
    serve.add_argument("--grpc-upstream", default="127.0.0.1:8001")
    serve.add_argument("--http-upstream", default="127.0.0.1:8000")
    serve.add_argument("--grpc-port", type=int, default=8443)
    serve.add_argument("--http-port", type=int, default=8080)
    serve.add_argument("--max-in-flight", type=int, default=0, help="default: Little's law over perf/slo.toml")
    serve.add_argument("--max-streams", type=int, default=0, help="default: the specs' decoupled max_batch slots")
    serve.add_argument("--max-body-bytes", type=int, default=0, help="default: the specs' largest item + 1 MiB")
    serve.add_argument("--profile", default="cpu", help="perf/slo.toml profile that sizes the in-flight cap")
    args = parser.parse_args(argv)
    if args.command == "token":
        print(new_token())
        return 0
    try:
        return _serve(args)
    except HotpathError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
