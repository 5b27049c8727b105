"""`python -m hotpath.openai_api`: the OpenAI-compatible API as a process of its own (uvicorn + uvloop +
httptools, one worker: one gRPC channel). `hotpath serve` starts it beside tritonserver; the container
runs it beside tritonserver too (docker/entrypoint.sh)."""

from __future__ import annotations

import argparse
import logging
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
    uvicorn.run(api.app, host=args.host, port=args.port, loop=args.loop, http="httptools", access_log=False,
                log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
