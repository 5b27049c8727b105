"""The tenant gateway in front of a local server (`hotpath serve --tenants FILE`): the development server in the
production shape, where every call goes through the doors a deployment publishes (docs/deployment.md)."""

from __future__ import annotations

import logging
from pathlib import Path

from hotpath import settings
from hotpath.gateway.config import TenantGatewaySettings
from hotpath.gateway.front_door import public_models
from hotpath.gateway.limits import admission_cap, max_body_bytes, stream_cap
from hotpath.gateway.openai_door import openai_config
from hotpath.gateway.tenant_gateway import TenantGateway
from hotpath.gateway.tenants import load_tenants
from hotpath.shared_state.cache_key import repository_build
from hotpath.shared_state.target import from_env
from hotpath.specs.repository import Repository

log = logging.getLogger(__name__)


def local_gateway(tenants: Path, grpc_url: str, http_url: str, openai_url: str = "",
                  repository: Path | None = None) -> TenantGateway:
    """A gateway (not started) on the default gateway ports of this host's loopback, in front of one local
    tritonserver (`grpc_url`, `http_url`: host:port) and its OpenAI API (`openai_url`: host:port, or "");
    quotas and the exact cache in $HOTPATH_REDIS_URL's Redis when it is set."""
    redis = from_env()
    served = Repository(repository)
    gateway = TenantGateway(TenantGatewaySettings(
        settings.gateway_grpc_port(), settings.gateway_http_port(), (grpc_url,), (http_url,), load_tenants(tenants),
        admission_cap(), max_body_bytes(), stream_cap(), redis=redis,
        cache_build=repository_build(served) if redis else "", status_port=settings.gateway_status_port(),
        models=public_models(served),
        openai_port=settings.gateway_openai_port() if openai_url else 0,
        openai_upstreams=(openai_url,) if openai_url else (),
        openai=openai_config(served.path) if openai_url else {}))
    for warning in gateway.settings.warnings():   # the tenants' scopes that deserve a look
        log.warning(f"[gateway] scopes: {warning}")
    return gateway
