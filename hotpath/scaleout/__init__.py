"""Scale out on one machine: N local tritonserver replicas behind NGINX.

The small-scale proof of deploy/'s Kubernetes layout: least-connection balancing over gRPC, a replica
that dies is skipped, and idempotent calls in flight on it are retried on another replica, through the
tenant gateway (the front door) or the bare replica balancer (balancer.py). Measured by
`python -m perf study failover` (perf.lab.studies.failover).
"""
