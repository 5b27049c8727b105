"""Health that tells the truth: a probe that sends real requests (runs in the container too)."""
