"""How fast the answers come: workloads, the interleaved runner against the baselines, and its report."""
