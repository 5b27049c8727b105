"""Every environment variable hotpath reads: one typed accessor each, with its default and what it does.

`HOTPATH_*` variables, and the few unprefixed ones the container's environment sets (its ports, its
repository, the tritonserver binary: docker/entrypoint.sh and the Kubernetes manifests name them).
An accessor reads the variable when called (tests and child processes change the environment), from
`os.environ` or from the mapping it is given (the container's command is built from one). Unset or
empty means the default. docs/configuration.md's "Environment variables" table lists every name here,
and tests/unit/test_settings.py fails when code reads a variable other than through this module, or one
missing from that table. Stdlib only. The variables the Python stubs read live in hotpath.runtime.settings, re-exported here.
"""

from __future__ import annotations

from hotpath.runtime.settings import (  # noqa: F401
                                      SETTINGS,
                                      Setting,
                                      _container,
                                      _flag,
                                      _optional,
                                      _setting,
                                      pg_dsn,
                                      retrieval_data_dir,
                                      root,
                                      stub_timing_dir,
                                      work_dir,
)

# Where things live (hotpath.paths; root and work_dir: hotpath.runtime.settings).
build_dir = _setting("BUILD_DIR", None, _optional, "model spec folder (default ./build)")
ensembles_dir = _setting("ENSEMBLES_DIR", None, _optional, "ensemble spec folder (default ./ensembles)")
python_backends_dir = _setting("PYTHON_BACKENDS_DIR", None, _optional,
                               "Python models' source folder (default ./python_backends)")
model_repository = _setting("MODEL_REPOSITORY", None, _optional, "repository to build and serve "
                            "(default ./model_repository)")

# Every hotpath server, local and container (hotpath.server).
admin_key = _setting("ADMIN_KEY", None, _optional, "key for Triton's restricted APIs; hotpath's tools send it")
admin_key_file = _setting("ADMIN_KEY_FILE", None, _optional,
                          "file holding that key (default .hotpath/admin-key, generated, 0600)")
cache_bytes = _setting("CACHE_BYTES", 256 * 1024 * 1024, int, "response cache size (0 disables)")
exit_timeout_s = _setting("EXIT_TIMEOUT_SECS", 30, int,
                          "after SIGTERM, how long tritonserver waits for in-flight requests and unloads")
trace_otlp_url = _setting("TRACE_OTLP_URL", None, _optional, "OpenTelemetry traces: OTLP/HTTP endpoint (unset: off)")
trace_rate = _setting("TRACE_RATE", 1000, int, "OpenTelemetry traces: one request in N")
trace_service = _setting("TRACE_SERVICE", "hotpath", str, "OpenTelemetry service name (container)")
probe_s = _setting("PROBE_SECS", 5.0, float, "the container's watchdog: seconds between probe rounds")

# The CLI.
http_port = _setting("HTTP_PORT", 8000, int, "`hotpath serve` HTTP port")
grpc_port = _setting("GRPC_PORT", 8001, int, "`hotpath serve` gRPC port")
metrics_port = _setting("METRICS_PORT", 8002, int, "`hotpath serve` metrics port")
grpc_url = _setting("GRPC_URL", "localhost:8001", str, "server for `hotpath embed` and the other client commands")
token = _setting("TOKEN", None, _optional, "tenant token `hotpath.client` and the CLI send to the tenant gateway")
openai_port = _setting("OPENAI_PORT", 8080, int, "`hotpath serve`: port of the OpenAI-compatible API (0: none)")
openai_api_key = _setting("OPENAI_API_KEY", None, _optional, "the OpenAI-compatible API's key (unset: none; "
                          "behind the tenant gateway the tenant token is the key)")
# The tenant gateway (`python -m hotpath.gateway serve`, `hotpath serve --tenants`, docker/gateway/): the public
# doors, apart from tritonserver's and the API's own ports so that both run on one host (docs/configuration.md).
gateway_http_port = _setting("GATEWAY_HTTP_PORT", 9000, int, "tenant gateway: public HTTP door (KServe v2)")
gateway_grpc_port = _setting("GATEWAY_GRPC_PORT", 9001, int, "tenant gateway: public gRPC door")
gateway_openai_port = _setting("GATEWAY_OPENAI_PORT", 9080, int, "tenant gateway: public OpenAI-compatible door")
gateway_status_port = _setting("GATEWAY_STATUS_PORT", 9002, int, "tenant gateway: its own /metrics and /health "
                               "(probes and Prometheus; never published)")
perf_profile = _setting("PERF_PROFILE", "cpu", str, "SLO profile for `perf`, `perf-check`, `tune`")

# Slow and idle clients, on every public listener: the gateway's doors and the OpenAI API alone
# (hotpath.gateway.client_bounds, hotpath.openai_api.connections; perf/reports/slow_clients.md measures them).
client_header_timeout_s = _setting("CLIENT_HEADER_TIMEOUT_SECS", 10, int, "public listeners: a connection that has "
                                   "not sent a whole request head this long after it opened is closed")
client_body_timeout_s = _setting("CLIENT_BODY_TIMEOUT_SECS", 10, int, "public listeners: a request body that stops "
                                 "arriving this long is cut (the API alone answers 408; NGINX closes and logs 408); "
                                 "at the gateway also an answer the client stops reading")
keepalive_timeout_s = _setting("KEEPALIVE_TIMEOUT_SECS", 30, int, "public listeners: an idle connection between "
                               "requests (HTTP/2: between streams) is closed after this long")
openai_max_connections = _setting("OPENAI_MAX_CONNECTIONS", 4096, int, "the OpenAI API alone: connections (or "
                                  "requests) open at once beyond which a new request is answered 503")

# Benchmarks (hotpath.sweeps).
allow_busy = _setting("ALLOW_BUSY", False, _flag, "measure even when other processes keep the CPU busy")
quiet_max_cores = _setting("QUIET_MAX_CORES", None, float, "cores other processes may use before a benchmark "
                           "refuses (default a tenth of the machine, at least 0.2)")
alt_endpoint = _setting("ALT_ENDPOINT", "text_embedding", str, "endpoint the FastAPI alternative serves")
alt_handler = _setting("ALT_HANDLER", "sync", str, "FastAPI alternative's handler: sync | async")
ort_threads = _setting("ORT_THREADS", 2, int, "ORT threads of the FastAPI/PyTriton/floor alternatives")
gen_threads = _setting("GEN_THREADS", 2, int, "torch threads of the FastAPI generation alternative")

# TensorRT checks for another host (hotpath.tensorrt.device).
gpu_name = _setting("GPU_NAME", None, _optional, "GPU name instead of the one found")
compute_capability = _setting("COMPUTE_CAPABILITY", None, _optional, "compute capability instead of the one found")
tensorrt_version = _setting("TENSORRT_VERSION", None, _optional, "TensorRT version instead of the installed one")

# Retrieval: pg_dsn and retrieval_data_dir (hotpath.runtime.settings, read inside Triton).

# text_generation's engine: read inside Triton by hotpath.runtime.llm.settings.engine_python (the precision
# gate calls that too); listed here for its default and the docs' table.
vllm_python = _setting("VLLM_PYTHON", None, _optional, "the vLLM environment's interpreter "
                       "(default .venv-vllm/bin/python, which scripts/setup.sh creates)")

# The fleet's shared state (hotpath.shared_state).
redis_url = _setting("REDIS_URL", None, _optional, "the fleet's Redis, redis://[:password@]host:port/db[?timeout_ms=N]: "
                     "shared quotas and exact cache of the gateway replicas (unset: each replica its own)")

# Read by docker/entrypoint.sh, not by Python: listed so the docs' table is complete.
cache_dir = _setting("CACHE_DIR", "/cache", str, "container: volume for rebuilt TensorRT plans")
on_incompatible = _setting("ON_INCOMPATIBLE", "rebuild", str,
                           "container: a plan that does not fit the GPU: rebuild | fail")
watchdog = _setting("WATCHDOG", True, _flag, "container: 0 execs tritonserver without the stub watchdog")
tenants_file = _setting("TENANTS_FILE", "/etc/hotpath/tenants/tenants.toml", str,
                        "gateway container (docker/gateway/entrypoint.sh): the tenants file, a mounted Secret; "
                        "SIGHUP reads it again")
tune_at_start = _setting("TUNE_AT_START", "off", str, "container: `quick` tunes this host once at first start "
                        "(result in the cache volume's tuned.json); `off`")

# The container's own environment (docker/entrypoint.sh, deploy/): unprefixed names.
container_http_port = _container("HTTP_PORT", 8000, int, "container: tritonserver's HTTP port")
container_grpc_port = _container("GRPC_PORT", 8001, int, "container: tritonserver's gRPC port (the health probe's too)")
container_metrics_port = _container("METRICS_PORT", 8002, int, "container: tritonserver's metrics port")
container_repository = _container("MODEL_REPOSITORY", "/models", str, "container: the repository it serves")
tritonserver = _container("TRITONSERVER", "tritonserver", str, "container: the tritonserver binary")
