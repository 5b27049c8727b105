"""Performance on a deployment, one folder per workflow: measure/ (the measurement core, the in-process floor),
tune/, explain/; registry.py is the composition root (one entry per endpoint), run.py / gate.py / report.py are
`hotpath perf`, `hotpath perf-check` and the report. The comparisons with rival servers and the studies are the
lab beside the package (perf/lab/ in a checkout, `python -m perf`), which imports this and is never imported by it."""
