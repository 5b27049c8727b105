"""Tuning: knobs, the moves the tuner may try, hill climbing against a p95 target, the run and its report."""
