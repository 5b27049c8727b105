#!/usr/bin/env bash
# Check the repository, then hand the process over to tritonserver (signals reach it directly).
set -euo pipefail
MODEL_REPOSITORY=${MODEL_REPOSITORY:-/models}
python3 -m hotpath.preflight "$MODEL_REPOSITORY"
exec tritonserver --model-repository="$MODEL_REPOSITORY" \
  --http-port="${HTTP_PORT:-8000}" --grpc-port="${GRPC_PORT:-8001}" --metrics-port="${METRICS_PORT:-8002}" \
  --cache-config="local,size=${RESPONSE_CACHE_BYTES:-268435456}" \
  --strict-readiness=true --exit-on-error=true "$@"
