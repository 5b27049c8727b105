"""Where a request's time goes: per-step breakdowns at low and high load, from statistics and traces."""
