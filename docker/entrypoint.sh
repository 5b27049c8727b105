#!/usr/bin/env bash
# Container start: check every TensorRT plan against this GPU and TensorRT version (rebuild what does
# not fit into the cache volume, or fail fast), check the repository, then exec tritonserver.
set -euo pipefail

MODEL_REPOSITORY=${MODEL_REPOSITORY:-/models}
CACHE_DIR=${HOTPATH_CACHE_DIR:-/cache}
ON_INCOMPATIBLE=${HOTPATH_ON_INCOMPATIBLE:-rebuild}   # rebuild | fail
TRITONSERVER=${TRITONSERVER:-tritonserver}
PYTHON=${PYTHON:-python3}
# Restricted APIs (hotpath.server.admin.RESTRICTED) need header `admin-key` (HTTP) /
# `triton-grpc-protocol-admin-key` (gRPC) with this value: $HOTPATH_ADMIN_KEY, else the file
# $HOTPATH_ADMIN_KEY_FILE (a mounted secret), else a random key that nobody knows (the APIs stay shut).
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

# Tuned values for this host (hotpath.tuning.tuned_values): $CACHE_DIR/tuned.json, keyed to the hardware it
# was measured on, overrides the image's committed knob defaults only when it was measured here; a foreign one
# is logged and left unused. HOTPATH_TUNE_AT_START=quick measures this host once first (seconds, in process:
# hotpath.tuning.start_tune) and keeps the result in the cache volume. Default off.
case "${HOTPATH_TUNE_AT_START:-off}" in
  off) ;;
  quick) "$PYTHON" -m hotpath.tuning.start_tune --served "$CACHE_DIR/repository" --file "$CACHE_DIR/tuned.json" ;;
  *) echo "error: HOTPATH_TUNE_AT_START=$HOTPATH_TUNE_AT_START: use off or quick" >&2; exit 2 ;;
esac
"$PYTHON" -m hotpath.tuning.tuned_values --served "$CACHE_DIR/repository" --file "$CACHE_DIR/tuned.json"

# The tritonserver command line: hotpath.server.command's container preset (the flags `hotpath serve`
# passes, less what differs by host: its docstring lists what and why). Ports, the response cache,
# the drain timeout and OpenTelemetry tracing come from the environment (HTTP_PORT, GRPC_PORT,
# METRICS_PORT, HOTPATH_CACHE_BYTES, HOTPATH_EXIT_TIMEOUT_SECS, HOTPATH_TRACE_OTLP_URL, ...).
export HOTPATH_ADMIN_KEY="$ADMIN_KEY"   # the command's restricted-API flags and the watchdog's reloads
cmd_file=$(mktemp)   # mode 0600: it holds the admin key
"$PYTHON" -m hotpath.server.command --binary "$TRITONSERVER" -- "${startup_args[@]}" "$@" > "$cmd_file"
mapfile -t server < "$cmd_file"
rm -f "$cmd_file"

# hotpath.server.supervise runs tritonserver under hotpath's watchdog (the one `hotpath serve` runs): a
# dead or hung stub's model is reloaded; when tritonserver exits or a reload fails it exits with it, so
# the orchestrator restarts the container. HOTPATH_WATCHDOG=0: exec tritonserver alone.
if [ "${HOTPATH_WATCHDOG:-1}" = "0" ]; then
  unset HOTPATH_ADMIN_KEY
  exec "${server[@]}"
fi
exec "$PYTHON" -m hotpath.server.supervise -- "${server[@]}"   # it keeps the key out of tritonserver's environment
