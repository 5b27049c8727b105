"""What operators watch: Prometheus rules, Grafana dashboards and autoscaling rules for every endpoint.

All of it is generated from the model repository (an endpoint's steps, whether it caches responses)
and perf/slo.toml (its p95 target), so a new endpoint or a changed target is one regeneration:
`hotpath monitoring` writes monitoring/ and deploy/'s adapter rules; `--check` fails when stale.
"""
