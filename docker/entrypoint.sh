#!/usr/bin/env bash
# Container start: check every TensorRT plan against this GPU and TensorRT version (rebuild what does
# not fit into the cache volume, or fail fast), check the repository, then exec tritonserver.
set -euo pipefail

MODEL_REPOSITORY=${MODEL_REPOSITORY:-/models}
CACHE_DIR=${HOTPATH_CACHE_DIR:-/cache}
ON_INCOMPATIBLE=${HOTPATH_ON_INCOMPATIBLE:-rebuild}   # rebuild | fail
TRITONSERVER=${TRITONSERVER:-tritonserver}
PYTHON=${PYTHON:-python3}
# Restricted APIs need header `admin-key` (HTTP) / `triton-grpc-protocol-admin-key` (gRPC) with this value:
# $HOTPATH_ADMIN_KEY, else the file $HOTPATH_ADMIN_KEY_FILE (a mounted secret), else a random key that
# nobody knows (the APIs stay shut). Same list as hotpath.server.admin.RESTRICTED (a unit test checks).
RESTRICTED_APIS="model-repository,shared-memory,logging,trace,statistics"
if [ -z "${HOTPATH_ADMIN_KEY:-}" ] && [ -n "${HOTPATH_ADMIN_KEY_FILE:-}" ]; then
  HOTPATH_ADMIN_KEY=$(tr -d ' \n' < "$HOTPATH_ADMIN_KEY_FILE")
fi
ADMIN_KEY=${HOTPATH_ADMIN_KEY:-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}

mkdir -p "$CACHE_DIR"
args_file="$CACHE_DIR/tritonserver.args"
"$PYTHON" -m hotpath.tensorrt.startup --repository "$MODEL_REPOSITORY" --cache "$CACHE_DIR" \
  --on-incompatible "$ON_INCOMPATIBLE" --args-file "$args_file"
mapfile -t startup_args < "$args_file"

# OpenTelemetry traces over OTLP/HTTP when HOTPATH_TRACE_OTLP_URL is set (host:port/v1/traces), one
# request in HOTPATH_TRACE_RATE: the flags `hotpath serve --trace-otlp` passes (hotpath/server/tracing.py).
trace_args=()
if [ -n "${HOTPATH_TRACE_OTLP_URL:-}" ]; then
  trace_args=(--trace-config=mode=opentelemetry "--trace-config=opentelemetry,url=${HOTPATH_TRACE_OTLP_URL}"
    "--trace-config=opentelemetry,resource=service.name=${HOTPATH_TRACE_SERVICE:-hotpath}"
    "--trace-config=rate=${HOTPATH_TRACE_RATE:-1000}" --trace-config=level=TIMESTAMPS)
fi

# Ready only when every model is; drain in-flight requests for up to HOTPATH_EXIT_TIMEOUT_SECS after
# SIGTERM; no model loading over the API; configs exactly as written.
exec "$TRITONSERVER" "${startup_args[@]}" \
  --http-port="${HTTP_PORT:-8000}" --grpc-port="${GRPC_PORT:-8001}" --metrics-port="${METRICS_PORT:-8002}" \
  --strict-readiness=true --exit-on-error=true --exit-timeout-secs="${HOTPATH_EXIT_TIMEOUT_SECS:-30}" \
  --model-control-mode=none --disable-auto-complete-config \
  --http-restricted-api="${RESTRICTED_APIS}:admin-key=${ADMIN_KEY}" \
  --grpc-restricted-protocol="${RESTRICTED_APIS}:admin-key=${ADMIN_KEY}" \
  --cache-config="local,size=${RESPONSE_CACHE_BYTES:-268435456}" \
  --metrics-config=summary_latencies=true "${trace_args[@]}" \
  "$@"
