"""Performance, one folder per workflow: measure/ (the measurement core), tune/, explain/, compare/ (the
alternatives side by side), studies/ (`hotpath study NAME`); registry.py is the composition root (one entry
per endpoint), run.py / gate.py / report.py are `hotpath perf`, `hotpath perf-check` and the report."""
