"""One tritonserver command line (hotpath.server.command): the local and container presets differ only
where the docstring's table says, and the entrypoint runs the container preset instead of its own flags."""

import os
import subprocess
import sys

from hotpath import paths
from hotpath.server import admin
from hotpath.server.command import TritonCommand, container

# What the module's docstring table says may differ (and why); everything else must be equal.
HOST_SPECIFIC = ("--model-repository=", "--backend-directory=", "--cache-directory=", "--http-address=",
                 "--grpc-address=", "--metrics-address=", "--trace-config=triton,file=", "--trace-config=level=OFF")


def _local(**kw) -> list[str]:
    return TritonCommand(binary="tritonserver", repository="/staged", backend_dir="/b", cache_dir="/c",
                         http_port=8000, grpc_port=8001, metrics_port=8002, address="127.0.0.1", admin_key="k",
                         model_control="explicit", trace_file="/t.json", **kw).args()


def test_local_and_container_presets_differ_only_where_the_host_does():
    env = {"HOTPATH_ADMIN_KEY": "k"}
    ours = [a for a in _local() if not a.startswith(HOST_SPECIFIC)]
    theirs = [a for a in container([], env=env).args() if not a.startswith(HOST_SPECIFIC)]
    assert ours == theirs
    for flag in ("--strict-readiness=true", "--exit-on-error=true", "--disable-auto-complete-config",
                 "--load-model=*", "--metrics-config=summary_latencies=true", *admin.restricted_api_flags("k")):
        assert flag in theirs, flag
    assert f"--cache-config=local,size={256 * 1024 * 1024}" in theirs   # one default for both


def test_container_preset_reads_its_environment():
    env = {"HOTPATH_ADMIN_KEY": "s3cret", "HTTP_PORT": "9000", "GRPC_PORT": "9001", "METRICS_PORT": "9002",
           "HOTPATH_CACHE_BYTES": "0", "HOTPATH_EXIT_TIMEOUT_SECS": "7", "HOTPATH_TRACE_OTLP_URL": "c:4318/v1/traces",
           "HOTPATH_TRACE_RATE": "10", "HOTPATH_TRACE_SERVICE": "edge"}
    args = container(["--model-repository=/cache/repository"], "/opt/tritonserver/bin/tritonserver", env).args()
    assert args[0] == "/opt/tritonserver/bin/tritonserver" and args[-1] == "--model-repository=/cache/repository"
    assert {"--http-port=9000", "--grpc-port=9001", "--metrics-port=9002", "--exit-timeout-secs=7",
            "--model-control-mode=explicit", "--trace-config=rate=10",
            "--trace-config=opentelemetry,resource=service.name=edge"} <= set(args)
    assert not [a for a in args if a.startswith("--cache-config")], "HOTPATH_CACHE_BYTES=0: no cache"
    assert not [a for a in args if a.startswith("--http-address")], "the container listens on every interface"


def test_the_entrypoint_writes_no_tritonserver_flag_of_its_own():
    script = (paths.ROOT / "docker" / "entrypoint.sh").read_text()
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    for flag in ("--strict-readiness", "--restricted", "--cache-config", "--model-control-mode", "--trace-config",
                 "--exit-timeout-secs", "--metrics-config", "--http-port"):
        assert flag not in code, flag
    assert "-m hotpath.server.command" in code


def test_the_module_prints_one_argument_per_line():
    run = subprocess.run([sys.executable, "-m", "hotpath.server.command", "--binary", "tb", "--", "--x=a b"],
                         env={**os.environ, "HOTPATH_ADMIN_KEY": "k"}, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "tb" and lines[-1] == "--x=a b"
    missing = subprocess.run([sys.executable, "-m", "hotpath.server.command"], capture_output=True, text=True,
                             env={k: v for k, v in os.environ.items() if k != "HOTPATH_ADMIN_KEY"})
    assert missing.returncode != 0 and "HOTPATH_ADMIN_KEY" in missing.stderr
