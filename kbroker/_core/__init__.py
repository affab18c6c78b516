"""The native core of kbroker: one compiled extension per concern.

``appender``   sequential segment writes (io_uring, pwritev fallback)
``index``      Kafka's sparse offset (.index) and time (.timeindex) indexes
``records``    record batch v2 validation and in-place offset assignment
``timewheel``  hierarchical timing wheel for delayed operations
``sendfile``   zero-copy segment-range transfer to sockets

There is deliberately no pure-Python twin: an ImportError here means the
extensions were not built (run ``make build``).
"""
