"""The measurement core: perf_analyzer runs, server-side breakdowns, payloads, load generators, host checks."""
