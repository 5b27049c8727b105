"""Performance: perf_analyzer runs, server-side breakdowns, SLO checks, tuning and reports."""
