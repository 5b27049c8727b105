"""NGINX (Debian's 1.22) on loopback: configs built as crossplane directives, the process that runs
one, its access log, and the failover policy for its upstreams. Two configs use it: the tenant gateway
(hotpath.gateway.config, the front door) and the replica balancer (hotpath.scaleout.balancer)."""
