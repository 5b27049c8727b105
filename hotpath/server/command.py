"""One tritonserver command line for every hotpath server, with a local and a container preset.

`LocalTriton` (`hotpath serve`, the tests, perf) builds it in Python; docker/entrypoint.sh runs
`python3 -m hotpath.server.command` and executes what it prints, so no flag is written twice.
Both presets share: strict readiness, exit on a load error, `--exit-timeout-secs` for draining,
configs exactly as written (no auto-complete), the restricted APIs behind the admin key, the response
cache (HOTPATH_CACHE_BYTES), latency summaries for the dashboards, OTLP tracing when asked. They
differ where the host differs, and only there:

| setting | local | container | why |
|---|---|---|---|
| bind address | 127.0.0.1 | all interfaces | a dev host's ports face its network; a container publishes only the ports mapped to it |
| backend and cache directories | the wheel's, found at run time | the image's defaults | the wheel's tritonserver has no fixed install path |
| model control | `none`, or `explicit` with the watchdog | `explicit` (the watchdog always runs) | tests and perf tools run servers without a watchdog |
| file tracing | trace file set, level OFF | - | `hotpath perf --explain` switches it on through the trace API |
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field

from hotpath import settings
from hotpath.runtime.tenancy import FORWARD_PATTERN
from hotpath.server.admin import restricted_api_flags
from hotpath.server.tracing import OtlpTracing

DEFAULT_CACHE_BYTES = settings.cache_bytes.default
DEFAULT_EXIT_TIMEOUT_S = settings.exit_timeout_s.default


def cache_bytes_from_env() -> int:
    """HOTPATH_CACHE_BYTES (0: no response cache), the same variable on every server."""
    return settings.cache_bytes()


def exit_timeout_from_env() -> int:
    return settings.exit_timeout_s()


@dataclass
class TritonCommand:
    """A tritonserver command line; `args()` renders it."""
    binary: str
    http_port: int
    grpc_port: int
    metrics_port: int
    admin_key: str
    repository: str | None = None           # None: the caller passes --model-repository in `extra`
    address: str | None = None               # None: tritonserver's default, every interface
    model_control: str = "none"
    exit_timeout_s: int = DEFAULT_EXIT_TIMEOUT_S
    cache_bytes: int = DEFAULT_CACHE_BYTES
    backend_dir: str | None = None
    cache_dir: str | None = None
    trace_file: str | None = None
    tracing: OtlpTracing | None = None
    extra: list[str] = field(default_factory=list)

    def args(self) -> list[str]:
        if self.model_control not in ("none", "explicit", "poll"):
            raise ValueError(f"model control must be none, explicit or poll, got {self.model_control!r}")
        cmd = [self.binary]
        if self.repository:
            cmd.append(f"--model-repository={self.repository}")
        if self.backend_dir:
            cmd.append(f"--backend-directory={self.backend_dir}")
        if self.cache_dir:
            cmd.append(f"--cache-directory={self.cache_dir}")
        cmd += [f"--http-port={self.http_port}", f"--grpc-port={self.grpc_port}", f"--metrics-port={self.metrics_port}"]
        if self.address:
            cmd += [f"--http-address={self.address}", f"--grpc-address={self.address}",
                    f"--metrics-address={self.address}"]
        cmd += ["--strict-readiness=true", "--exit-on-error=true", f"--exit-timeout-secs={self.exit_timeout_s}",
                f"--model-control-mode={self.model_control}", "--disable-auto-complete-config",
                "--log-info=true",
                # Latency quantiles per model, which the dashboards and alerts of monitoring/ read.
                "--metrics-config=summary_latencies=true",
                # The tenant and collection the gateway set reach the models as request parameters
                # (hotpath.runtime.tenancy).
                f"--grpc-header-forward-pattern={FORWARD_PATTERN}", f"--http-header-forward-pattern={FORWARD_PATTERN}",
                # Repository, shared memory, logging, trace and statistics APIs only with the admin key.
                *restricted_api_flags(self.admin_key)]
        if self.model_control == "explicit":
            cmd.append("--load-model=*")
        if self.cache_bytes:
            cmd.append(f"--cache-config=local,size={self.cache_bytes}")
        if self.trace_file:
            # Trace file set, tracing off: the trace API can switch tracing on at run time, but Triton
            # only accepts the file location at startup.
            cmd += [f"--trace-config=triton,file={self.trace_file}", "--trace-config=level=OFF"]
        if self.tracing:
            cmd += self.tracing.flags()
        return cmd + list(self.extra)


def container(extra: list[str], binary: str = "tritonserver", env: dict[str, str] | None = None) -> TritonCommand:
    """The production container's command: ports, key, cache, drain and tracing from its environment."""
    env = dict(os.environ if env is None else env)
    key = settings.admin_key(env)
    if not key:
        raise SystemExit("hotpath.server.command: HOTPATH_ADMIN_KEY is not set (docker/entrypoint.sh sets it)")
    tracing = None
    if url := settings.trace_otlp_url(env):
        tracing = OtlpTracing(url, settings.trace_rate(env), settings.trace_service(env))
    return TritonCommand(
        binary=binary, http_port=settings.container_http_port(env), grpc_port=settings.container_grpc_port(env),
        metrics_port=settings.container_metrics_port(env), admin_key=key, model_control="explicit",
        exit_timeout_s=settings.exit_timeout_s(env), cache_bytes=settings.cache_bytes(env), tracing=tracing,
        extra=extra)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m hotpath.server.command",
                                     description="Print the container's tritonserver command line, one argument per line.")
    parser.add_argument("--binary", default=settings.tritonserver())
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="-- then arguments appended as they are")
    args = parser.parse_args(argv)
    extra = args.extra[1:] if args.extra[:1] == ["--"] else args.extra
    cmd = container(extra, args.binary).args()
    if any("\n" in a for a in cmd):
        raise SystemExit("hotpath.server.command: an argument holds a newline")
    sys.stdout.write("\n".join(cmd) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
