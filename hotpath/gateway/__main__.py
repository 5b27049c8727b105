"""`python -m hotpath.gateway token` prints a new tenant token; `python -m hotpath.gateway serve ...` runs the
tenant gateway in front of tritonserver replicas (gRPC and HTTP doors) and their OpenAI-compatible APIs (the
OpenAI door, with `--openai-upstream`) until Ctrl-C or SIGTERM (limits sized as in hotpath.gateway.limits;
ports in docs/configuration.md); SIGHUP reads the tenants file again. With a Redis (`--redis URL`,
`--redis local` or HOTPATH_REDIS_URL) the quotas and the exact cache are shared by every replica using it."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import signal
import sys
import threading

from hotpath import logs, settings
from hotpath.errors import HotpathError
from hotpath.gateway.config import TenantGatewaySettings
from hotpath.gateway.limits import admission_cap, max_body_bytes, stream_cap
from hotpath.gateway.openai_door import AFFINITY_FACTOR, openai_config
from hotpath.gateway.tenant_gateway import TenantGateway
from hotpath.gateway.tenants import load_tenants, new_token
from hotpath.shared_state.cache_key import DEFAULT_TTL_S, repository_build
from hotpath.shared_state.server import LocalRedis
from hotpath.shared_state.target import URL_ENV, from_env, parse_url

log = logging.getLogger(__name__)


def _serve(args: argparse.Namespace) -> int:
    with contextlib.ExitStack() as stack:
        if args.redis == "local":   # a redis-server of its own, gone with this process
            redis = stack.enter_context(LocalRedis()).target
            log.info(f"[gateway] started a local Redis at {redis.url}")
        else:
            redis = parse_url(args.redis) if args.redis else from_env()
        return _serve_with(args, redis)


def _serve_with(args: argparse.Namespace, redis) -> int:
    config = gateway_settings(args, redis)
    signals: list[int] = []   # SIGTERM and SIGHUP, handled in the loop below (not inside a handler)
    wake = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda number, _: (signals.append(number), wake.set()))
    with TenantGateway(config) as gateway:
        log.info(f"[gateway] {gateway.summary()}")
        _warn(config)
        try:
            while signal.SIGTERM not in signals:
                wake.wait(0.5)
                wake.clear()
                if signal.SIGHUP in signals:   # the tenants file again, without dropping a call
                    signals.remove(signal.SIGHUP)
                    _reload_tenants(gateway, args.tenants)
                if gateway.process.poll() is not None:
                    raise HotpathError(f"nginx exited with {gateway.process.returncode}")
        except KeyboardInterrupt:
            pass
    return 0


def gateway_settings(args: argparse.Namespace, redis) -> TenantGatewaySettings:
    """The settings `serve`'s flags describe (tenants read from their file now)."""
    grpc_upstreams = tuple(args.grpc_upstream or ["127.0.0.1:8001"])
    http_upstreams = tuple(args.http_upstream or ["127.0.0.1:8000"])
    if len(grpc_upstreams) != len(http_upstreams):
        raise HotpathError("give one --http-upstream per --grpc-upstream (the same replicas, in the same order)")
    openai_upstreams = tuple(args.openai_upstream or ())
    return TenantGatewaySettings(
        args.grpc_port, args.http_port, grpc_upstreams, http_upstreams, load_tenants(args.tenants),
        args.max_in_flight or admission_cap(args.profile), args.max_body_bytes or max_body_bytes(),
        args.max_streams or stream_cap(), redis=redis,
        cache_build=repository_build() if redis and args.cache_ttl else "", cache_ttl_s=args.cache_ttl or DEFAULT_TTL_S,
        status_port=args.status_port, listen_address=args.listen,
        openai_port=args.openai_port if openai_upstreams else 0, openai_upstreams=openai_upstreams,
        openai=openai_config() if openai_upstreams else {}, openai_affinity=args.openai_affinity == "on",
        openai_affinity_factor=args.openai_affinity_factor)


def _warn(config: TenantGatewaySettings) -> None:
    """The tenants' scopes that deserve a look: tenants without any, names nothing serves."""
    for warning in config.warnings():
        log.warning(f"[gateway] scopes: {warning}")


def _reload_tenants(gateway: TenantGateway, path: str) -> None:
    """Serve the tenants file as it is now; a broken file keeps the tenants served before."""
    try:
        gateway.reload(dataclasses.replace(gateway.settings, tenants=load_tenants(path)))
    except HotpathError as exc:
        log.error(f"[gateway] reload refused, still serving the previous tenants: {exc}")
        return
    log.info(f"[gateway] reloaded: {len(gateway.settings.tenants)} tenant(s)")
    _warn(gateway.settings)


def command_line() -> argparse.ArgumentParser:
    """The parser of `python -m hotpath.gateway` (token | serve)."""
    parser = argparse.ArgumentParser(prog="python -m hotpath.gateway", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("token", help="print a new random tenant token")
    serve = sub.add_parser("serve", help="run the gateway until Ctrl-C")
    serve.add_argument("--tenants", required=True, help="tenants TOML file (hotpath.gateway.tenants)")
    serve.add_argument("--grpc-upstream", action="append",
                       help="a replica's gRPC address; repeat for replicas (default 127.0.0.1:8001)")
    serve.add_argument("--http-upstream", action="append",
                       help="the same replica's HTTP address, in the same order (default 127.0.0.1:8000)")
    serve.add_argument("--openai-upstream", action="append",
                       help="a replica's OpenAI-compatible API (python -m hotpath.openai_api); repeat for replicas; "
                            "opens the OpenAI door (default: no OpenAI door)")
    serve.add_argument("--openai-affinity", choices=("on", "off"), default="on",
                       help="a chat conversation's turns go to the replica that served its first ones, within a "
                            "load bound (default on; off: every call to the least-loaded replica)")
    serve.add_argument("--openai-affinity-factor", type=float, default=AFFINITY_FACTOR, metavar="FACTOR",
                       help=f"conversation affinity's load bound: no replica above FACTOR x the mean calls in flight "
                            f"(>= 1, default {AFFINITY_FACTOR})")
    serve.add_argument("--listen", default="127.0.0.1", metavar="ADDRESS",
                       help="address every door listens on (default 127.0.0.1; a container's 0.0.0.0)")
    serve.add_argument("--grpc-port", type=int, default=settings.gateway_grpc_port())
    serve.add_argument("--http-port", type=int, default=settings.gateway_http_port())
    serve.add_argument("--openai-port", type=int, default=settings.gateway_openai_port(),
                       help="the OpenAI door's port, with --openai-upstream")
    serve.add_argument("--status-port", type=int, default=settings.gateway_status_port(),
                       help="the gateway's own /metrics and /health (for probes and Prometheus, never published)")
    serve.add_argument("--max-in-flight", type=int, default=0, help="default: Little's law over perf/slo.toml")
    serve.add_argument("--max-streams", type=int, default=0, help="default: the specs' decoupled max_batch slots")
    serve.add_argument("--max-body-bytes", type=int, default=0, help="default: the specs' largest item + 1 MiB")
    serve.add_argument("--profile", default="cpu", help="perf/slo.toml profile that sizes the in-flight cap")
    serve.add_argument("--redis", default="", help=f"redis://host:port/db of the fleet's Redis, or 'local' to start "
                       f"one (default ${URL_ENV}; none: quotas per replica, no shared cache)")
    serve.add_argument("--cache-ttl", type=int, default=DEFAULT_TTL_S,
                       help="seconds a cacheable answer stays in Redis; 0: no exact cache")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = command_line().parse_args(argv)
    if args.command == "token":
        print(new_token())
        return 0
    logs.configure()
    try:
        return _serve(args)
    except HotpathError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
