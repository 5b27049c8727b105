"""perf/: what every endpoint is measured against (slo.toml), with what (data/: payloads) and what came out
(reports/), and the lab (lab/: hotpath beside rival servers, one-off studies, experiments). Not installed
(pyproject's package list is hotpath's); the lab runs from a checkout's root as `python -m perf`. Data flows
one way: the lab imports hotpath, hotpath never imports the lab (tests/unit/test_layout.py)."""
