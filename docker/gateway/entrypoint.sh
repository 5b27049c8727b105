#!/usr/bin/env bash
# The gateway container's start (docker/gateway/Dockerfile): check the tenants file (a mounted Kubernetes Secret
# or a read-only bind mount), then exec the gateway so that it receives the container's signals itself:
# SIGHUP reads the tenants file again, SIGTERM stops NGINX and the stream admission. Every door listens on
# 0.0.0.0; the arguments (the image's CMD: the upstreams) come last, so a flag given there wins.
set -euo pipefail

TENANTS_FILE=${HOTPATH_TENANTS_FILE:-/etc/hotpath/tenants/tenants.toml}
if [ ! -f "$TENANTS_FILE" ] || [ ! -r "$TENANTS_FILE" ]; then
  echo "error: no readable tenants file at $TENANTS_FILE (HOTPATH_TENANTS_FILE): mount the tenants" \
       "Secret there (key tenants.toml; python -m hotpath.gateway token makes a token)" >&2
  exit 2
fi

exec python3 -m hotpath.gateway serve --listen 0.0.0.0 --tenants "$TENANTS_FILE" "$@"
