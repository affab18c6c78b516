"""A PySpark data source for kbroker (and any Kafka broker), on Spark 4's Python Data Source API.

    import kbroker_spark
    kbroker_spark.register(spark)
    df = (spark.read.format("kbroker").option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "t").load())
    df.selectExpr("key", "value").write.format("kbroker")
        .option("kafka.bootstrap.servers", "127.0.0.1:9092").option("topic", "out").save()

Options follow Spark's Kafka source: ``kafka.bootstrap.servers``, ``subscribe`` (comma-separated topics) or
``subscribePattern`` (a regex), ``startingOffsets`` / ``endingOffsets`` ("earliest", "latest" or JSON such as
``{"t": {"0": 23, "1": -2}}`` with -2 = earliest, -1 = latest), ``maxOffsetsPerTrigger``. Any other
``kafka.*`` option is passed to librdkafka. Rows: key, value (binary), topic, partition, offset, timestamp,
headers (array of struct<key string, value binary>).

Reading: one Spark input partition per topic partition and offset range; an executor assigns the partition,
seeks to the start and reads (read_committed) until its position reaches the end offset.

Writing: rows carry ``value`` and optionally ``key``, ``topic`` (else the ``topic`` option), ``partition``
and ``headers``. Without a partition, a keyed row goes to ``toPositive(murmur2(key)) % partitions``, Kafka's
Java default partitioner and librdkafka's ``murmur2_random``, so Spark, Java and librdkafka producers put a
key in the same partition; a row without a key goes to a random partition.

Streaming writes are exactly once. Each Spark task of micro-batch B writes its rows in one Kafka transaction
whose transactional.id is ``kbroker-spark-<sink id>-<task partition>``; the same transaction writes a marker
``<sink id>/<task partition> -> B`` to a compacted commit topic (``<topic>.kbroker-spark-commits`` unless
``kbroker.sink.commitTopic`` says otherwise). Before writing, the task calls init_transactions (which fences
any earlier attempt of the same task and completes or aborts its transaction) and then reads the last marker
of its key with read_committed: if it is already >= B, the batch was written by an earlier attempt (a task
retry, or a replay after a restart of a batch that was written but not recorded in Spark's commit log) and
the task writes nothing. Replays see the same rows per task because Spark replays a batch with the offsets
recorded in its offset log and this source plans the same input partitions for the same offsets. The sink
id is the ``kbroker.sink.id`` option, else the streaming query id (kept in the checkpoint).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from kbroker_spark.options import SCHEMA, Options
from kbroker_spark.reading import BatchReader, StreamReader
from kbroker_spark.writing import BatchWriter, StreamWriter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class KBrokerDataSource(DataSource):
    """``format("kbroker")``: batch and streaming reads and writes of Kafka topics."""

    @classmethod
    def name(cls) -> str:
        return "kbroker"

    def schema(self) -> str:
        return SCHEMA

    def _options(self) -> Options:
        # Spark hands options over case-insensitively: keep them lower-cased
        return {str(k).lower(): v for k, v in self.options.items()}

    def reader(self, schema: StructType) -> BatchReader:
        return BatchReader(self._options())

    def streamReader(self, schema: StructType) -> StreamReader:
        return StreamReader(self._options())

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        return BatchWriter(self._options())

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        return StreamWriter(self._options())


def register(spark: SparkSession) -> None:
    """Make ``format("kbroker")`` available in a SparkSession."""
    spark.dataSource.register(KBrokerDataSource)
