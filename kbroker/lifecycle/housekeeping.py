"""The broker's periodic work, on one loop task: flush and compaction every period; retention,
offset checkpoints, preferred-leader rebalancing (the active controller only), timed-out
transactions and expired group offsets each on their own Kafka interval; the log dirs' free space
(for /metrics, measured in a thread) every few seconds."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from kbroker.config.broker import BrokerConfig
from kbroker.coordinator.group.binding import GroupBinding
from kbroker.coordinator.transaction.binding import TransactionBinding
from kbroker.log import LogManager
from kbroker.log.disk_space import MEASURE_INTERVAL_S


async def housekeeping(config: BrokerConfig, log_manager: LogManager, groups: GroupBinding,
                       transactions: TransactionBinding,
                       rebalance_leaders: Callable[[], Awaitable[None]] | None) -> None:
    cfg = config
    checkpoint_s = (cfg.log_flush_offset_checkpoint_interval_ms or 60000) / 1000
    period = min(cfg.log_retention_check_interval_ms / 1000, checkpoint_s, 1.0)
    intervals = {
        "retention": cfg.log_retention_check_interval_ms / 1000,
        "checkpoint": checkpoint_s,
        "rebalance": float(cfg.leader_imbalance_check_interval_seconds),
        "transactions": cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms / 1000,
        "offsets": cfg.offsets_retention_check_interval_ms / 1000,
        "disk_space": MEASURE_INTERVAL_S,
    }
    last = dict.fromkeys(intervals, time.monotonic())

    def due(name: str, now: float) -> bool:
        if now - last[name] < intervals[name]:
            return False
        last[name] = now
        return True

    while True:
        await asyncio.sleep(period)
        now = time.monotonic()
        log_manager.flush_dirty()
        log_manager.clean()  # compaction: applies a finished job, hands the next to the cleaner thread
        if due("disk_space", now):
            log_manager.measure_disk_space()
        if due("retention", now):
            log_manager.cleanup()
        if due("checkpoint", now):
            log_manager.checkpoint()
        if rebalance_leaders is not None and cfg.auto_leader_rebalance_enable and due("rebalance", now):
            await rebalance_leaders()
        if due("transactions", now) and transactions.coordinator is not None:
            transactions.coordinator.abort_timed_out()
        if due("offsets", now) and groups.coordinator is not None:
            await groups.coordinator.cleanup_expired_offsets()
