"""What the benchmarks and the tests share: broker processes, targets, load, latency, values, provenance."""
