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
# A given key: surrounding whitespace dropped (a secret file's newline, CRLF), then the characters
# tritonserver's flag can hold (no ',', ':', '=', spaces): hotpath.server.admin.KEY_PATTERN.
ADMIN_KEY_PATTERN='^[A-Za-z0-9._~+/-]+$'
trim() { local s=$1; s=${s#"${s%%[![:space:]]*}"}; printf '%s' "${s%"${s##*[![:space:]]}"}"; }
ADMIN_KEY=$(trim "${HOTPATH_ADMIN_KEY:-}")
key_source="\$HOTPATH_ADMIN_KEY"
if [ -z "$ADMIN_KEY" ] && [ -n "${HOTPATH_ADMIN_KEY_FILE:-}" ]; then
  key_source=$HOTPATH_ADMIN_KEY_FILE
  if [ ! -f "$HOTPATH_ADMIN_KEY_FILE" ] || [ ! -r "$HOTPATH_ADMIN_KEY_FILE" ]; then
    echo "error: HOTPATH_ADMIN_KEY_FILE=$HOTPATH_ADMIN_KEY_FILE: no readable file" >&2
    exit 2
  fi
  ADMIN_KEY=$(trim "$(< "$HOTPATH_ADMIN_KEY_FILE")")
fi
if { [ -n "$ADMIN_KEY" ] || [ -n "${HOTPATH_ADMIN_KEY_FILE:-}" ]; } && ! [[ $ADMIN_KEY =~ $ADMIN_KEY_PATTERN ]]; then
  echo "error: admin key from $key_source is empty or has characters other than letters, digits and ._~+/-" >&2
  exit 2
fi
ADMIN_KEY=${ADMIN_KEY:-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}

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
# SIGTERM; configs exactly as written. Explicit model control so that the watchdog can reload a model
# whose Python stub died (the repository API stays behind the admin key).
server=("$TRITONSERVER" "${startup_args[@]}"
  --http-port="${HTTP_PORT:-8000}" --grpc-port="${GRPC_PORT:-8001}" --metrics-port="${METRICS_PORT:-8002}"
  --strict-readiness=true --exit-on-error=true --exit-timeout-secs="${HOTPATH_EXIT_TIMEOUT_SECS:-30}"
  --model-control-mode=explicit --load-model='*' --disable-auto-complete-config
  --http-restricted-api="${RESTRICTED_APIS}:admin-key=${ADMIN_KEY}"
  --grpc-restricted-protocol="${RESTRICTED_APIS}:admin-key=${ADMIN_KEY}"
  --cache-config="local,size=${RESPONSE_CACHE_BYTES:-268435456}"
  --metrics-config=summary_latencies=true "${trace_args[@]}"
  "$@")
# hotpath.server.supervise runs tritonserver under hotpath's watchdog (the one `hotpath serve` runs): a
# dead or hung stub's model is reloaded; when tritonserver exits or a reload fails it exits with it, so
# the orchestrator restarts the container. HOTPATH_WATCHDOG=0: exec tritonserver alone.
if [ "${HOTPATH_WATCHDOG:-1}" = "0" ]; then
  exec "${server[@]}"
fi
export HOTPATH_ADMIN_KEY="$ADMIN_KEY"   # the watchdog's reloads need it; supervise keeps it from tritonserver
exec "$PYTHON" -m hotpath.server.supervise -- "${server[@]}"
