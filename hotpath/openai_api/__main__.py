"""`python -m hotpath.openai_api`: the OpenAI-compatible API as a process of its own (uvicorn + uvloop +
httptools, one worker: one gRPC channel). `hotpath serve` starts it beside tritonserver; the container
runs it beside tritonserver too (docker/entrypoint.sh).

Slow and idle clients are bounded as at the gateway's doors (hotpath.settings' CLIENT_* and KEEPALIVE_*
timeouts): request heads by hotpath.openai_api.connections, bodies by the app (408), and at most
OPENAI_MAX_CONNECTIONS connections answered at once (503 beyond: uvicorn's limit_concurrency), within the
descriptors this process may open (raised to its hard limit)."""

from __future__ import annotations

import argparse
import logging
import resource
import sys
from pathlib import Path

from hotpath import settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hotpath.openai_api", description=__doc__)
    parser.add_argument("--grpc-url", default=settings.grpc_url(), help="tritonserver's gRPC address")
    parser.add_argument("--repository", default=None, help="the repository that server serves (default ./model_repository)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=settings.openai_port())
    parser.add_argument("--alias", action="append", default=[], metavar="ALIAS=ENDPOINT",
                        help="another model name for an endpoint (repeatable)")
    parser.add_argument("--max-body-bytes", type=int, default=None)
    parser.add_argument("--max-in-flight", type=int, default=None)
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="uvloop", help="the event loop")
    parser.add_argument("--exit-with-parent", action="store_true",
                        help="exit when the process that started this one is gone (hotpath serve)")
    args = parser.parse_args(argv)
    if args.exit_with_parent:
        from hotpath.runtime.lifetime import exit_with_server

        exit_with_server()   # the parent's pidfd, watched from this process and from a watcher beside it
    import uvicorn

    from hotpath import paths
    from hotpath.openai_api.app import APIConfig, OpenAIAPI
    from hotpath.openai_api.catalog import parse_aliases

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from hotpath.shared_state.target import from_env

    config = APIConfig(args.grpc_url, Path(args.repository or paths.model_repository()), parse_aliases(args.alias),
                       api_key=settings.openai_api_key(), redis=from_env())
    if args.max_body_bytes:
        config.max_body_bytes = args.max_body_bytes
    if args.max_in_flight:
        config.max_in_flight = args.max_in_flight
    api = OpenAIAPI(config)
    logging.getLogger("hotpath.openai_api").info(
        f"serving {', '.join(api.models)} on http://{args.host}:{args.port}/v1 (Triton at {args.grpc_url})")
    from hotpath.openai_api.connections import protocol

    max_connections = settings.openai_max_connections()
    _raise_open_files(max_connections)
    uvicorn.run(api.app, host=args.host, port=args.port, loop=args.loop, access_log=False, log_level="warning",
                lifespan="on", timeout_graceful_shutdown=5, http=protocol(settings.client_header_timeout_s()),
                timeout_keep_alive=settings.keepalive_timeout_s(), limit_concurrency=max_connections)
    return 0


def _raise_open_files(connections: int) -> None:
    """The soft descriptor limit up to the hard one (often 1024 soft): each connection holds one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft != resource.RLIM_INFINITY and soft < connections + 256:
        logging.getLogger("hotpath.openai_api").warning(
            f"{connections} connections allowed but only {soft} descriptors: raise `ulimit -n`")


if __name__ == "__main__":
    sys.exit(main())
