"""Load generators for any Kafka broker: Locust users (``locust -f bench/load/locustfile.py``) and a PySpark job."""
