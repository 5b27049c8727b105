"""Scale out on one machine: N local tritonserver replicas behind an NGINX gRPC upstream.

The small-scale proof of deploy/'s Kubernetes layout: least-connection balancing over gRPC,
a replica that dies is skipped, and idempotent inference calls in flight on it are retried on
another replica.
"""
