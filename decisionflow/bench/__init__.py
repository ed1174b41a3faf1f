"""How fast the answers come: workloads, baselines, the interleaved runner and its report."""
