"""What tuning knows: p95 targets (SLOs), the knobs, per-host tuned values and the hardware key."""
