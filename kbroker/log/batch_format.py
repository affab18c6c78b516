"""The record-batch format as the layers above the log see it: the compiled core's header parsing, scans and
v2 validation (``kbroker._core.records``, typed in its ``.pyi``). Only the log and the network import the core
(the ``core_face`` import contract); what the replicas and replication need of it goes through here."""
from __future__ import annotations

from kbroker._core.records import (
    BatchHeader as BatchHeader,
    RecordBatchError as RecordBatchError,
    parse_header as parse_header,
    scan_batches as scan_batches,
    validate as validate,
)
