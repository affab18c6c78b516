"""PySpark load generator: N rows written to a topic from local[*] executors through kbroker_spark, read back.

    python -m bench.load.spark_load [--rows 1000000] [--size 100] [--partitions 8] [--bootstrap HOST:PORT]

Without --bootstrap it starts a fresh kbroker (bench.harness.broker_load.start_broker). Prints JSON lines: the write
and the read with rows/s and MB/s, then a summary.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import broker_load
from bench.harness.results_meta import header

REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--size", type=int, default=100, help="value bytes per row")
    p.add_argument("--partitions", type=int, default=8, help="topic partitions (= Spark read partitions)")
    p.add_argument("--bootstrap", default=None, help="a running broker (default: start a fresh kbroker)")
    p.add_argument("--master", default="local[*]")
    args = p.parse_args(argv)
    print(json.dumps(header(__file__, argv)), flush=True)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import kbroker_spark

    workdir = Path(tempfile.mkdtemp(prefix="kbroker-spark-load-", dir=REPO))
    broker = None
    try:
        if args.bootstrap is None:
            broker = broker_load.start_broker("kbroker", None, workdir)
        bootstrap = args.bootstrap or broker.bootstrap
        topic = f"spark-load-{int(time.time())}"
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
        spark = (SparkSession.builder.master(args.master).appName("kbroker-spark-load")
                 .config("spark.ui.enabled", "false").getOrCreate())
        kbroker_spark.register(spark)
        pad = "x" * max(0, args.size - 12)
        df = spark.range(args.rows, numPartitions=args.partitions).selectExpr(
            "cast(cast(id as string) as binary) as key", f"cast(concat(lpad(cast(id as string), 12, '0'), '{pad}') "
            "as binary) as value")
        start = time.perf_counter()
        (df.write.format("kbroker").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
         .mode("append").save())
        elapsed = time.perf_counter() - start
        print(json.dumps({"phase": "write", "rows": args.rows, "elapsed_s": round(elapsed, 2),
                          "rows_s": round(args.rows / elapsed),
                          "mb_s": round(args.rows * args.size / elapsed / 1e6, 2)}),
              flush=True)
        start = time.perf_counter()
        got = (spark.read.format("kbroker").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
               .load().selectExpr("length(value) as n").groupBy().sum("n").collect()[0][0])
        elapsed = time.perf_counter() - start
        print(json.dumps({"phase": "read", "bytes": got, "elapsed_s": round(elapsed, 2),
                          "rows_s": round(args.rows / elapsed), "mb_s": round(got / elapsed / 1e6, 2)}), flush=True)
        ok = got == args.rows * max(args.size, 12)
        print(json.dumps({"summary": True, "rows": args.rows, "read_back_ok": ok}), flush=True)
        spark.stop()
        return 0 if ok else 1
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
