"""The tenant gateway: NGINX in front of one tritonserver (or its replicas), for gRPC and HTTP.

Per request, in this order: a tenant token (`authorization: Bearer <token>`, else UNAUTHENTICATED /
HTTP 401), the tenant's rate limit (RESOURCE_EXHAUSTED / 429), the request-size limit
(INVALID_ARGUMENT / 413) and admission control, a cap on inference calls in flight on the server
(UNAVAILABLE / 503, answered at once). Triton 2.51 cannot shed load itself: any queue policy stalls
its dynamic batcher (perf/reports/overload.md), so excess load is refused here.
"""
