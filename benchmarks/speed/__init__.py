"""Speed: warm and cold latency of a request, number formats and the processor's instruction sets, other engines on the same presets."""
