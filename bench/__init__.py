"""kbroker's benchmarks, laid out by purpose; ``python -m bench --list`` prints every entry point.

suite/         the standing benchmarks: ``python -m bench`` (bench/__main__.py) and its parts, storage, throughput,
               cluster
experiments/   one question each, measured once and kept to be rerun (the cleaner's placement, the GIL and CRC,
               the metrics' cost, TLS, the acks=all round trip and its floor)
reliability/   what must not break under hostile conditions: chaos, fuzz, abuse
load/          load generators for a broker someone else runs: Locust, Spark
harness/       what the others (and tests/) import: broker processes, targets, clients' load, latency pacing,
               values, batches, the security setup, results provenance, the entry-point catalog
results/       saved output; every file records its command, commit and date (in a line, or a .meta.json beside it)

bench/ is a source-tree tool that tests may import; the shipped packages never import it.
"""
