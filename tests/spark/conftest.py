"""A local[2] SparkSession with the kbroker data source and a broker process (tests/integration/conftest.py)."""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("pyspark")

from tests.integration.conftest import module_broker  # noqa: E402,F401  (the fixture)


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    from pyspark.sql import SparkSession

    import kbroker_spark

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[2]").appName("kbroker-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
               .config("spark.sql.streaming.stopTimeout", "30s")
               .getOrCreate())
    kbroker_spark.register(session)
    yield session
    session.stop()
