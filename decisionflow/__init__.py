"""decisionflow: typed, closed-set decisions read from a pretrained LLM's next-token scores."""
