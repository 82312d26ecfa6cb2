"""Results: per-run statistics, per-configuration aggregation, paper-style exports."""
