"""Serving: the HTTP server's throughput, its behaviour under load and its timeouts, and the OpenAI-compatible and `/v1/decisions` routes."""
