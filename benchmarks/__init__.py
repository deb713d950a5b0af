"""Hand-run throughput benchmarks (not tests); run each as `python -m benchmarks.<name>` from the repo root."""
