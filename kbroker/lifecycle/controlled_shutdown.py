"""The broker side of Kafka's controlled shutdown: before stopping, ask the controller to move this
broker's leaderships away (ControlledShutdown v3), up to ``controlled.shutdown.max.retries`` more
times while some remain, so clients see a leader change instead of a dead leader."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kbroker import errors
from kbroker.config.broker import BrokerConfig
from kbroker.interbroker.client import BrokerConnection
from kbroker.metadata.zk_view import LiveBroker

log = logging.getLogger(__name__)

CONTROLLED_SHUTDOWN = 7
CONTROLLED_SHUTDOWN_VERSION = 3


async def controlled_shutdown(config: BrokerConfig, broker_id: int,
                              find_controller: Callable[[], LiveBroker | None]) -> bool:
    """True once the controller answered that no leadership is left here."""
    for attempt in range(config.controlled_shutdown_max_retries + 1):
        if attempt:
            await asyncio.sleep(config.controlled_shutdown_retry_backoff_ms / 1000)
        controller = find_controller()
        if controller is None:
            log.info("controlled shutdown: no controller known yet")
            continue
        conn = BrokerConnection(controller.host, controller.port, f"broker-{broker_id}-shutdown",
                                config.request_timeout_ms / 1000)
        try:
            response = await conn.request(CONTROLLED_SHUTDOWN, CONTROLLED_SHUTDOWN_VERSION,
                                          {"broker_id": broker_id, "broker_epoch": -1})
        except OSError as exc:
            log.info("controlled shutdown: controller %d unreachable: %s", controller.id, exc)
            continue
        finally:
            conn.close()
        if response.error_code:
            log.info("controlled shutdown refused by %d: %s", controller.id,
                     errors.for_code(response.error_code).__name__)
            continue
        if not response.remaining_partitions:
            log.info("controlled shutdown complete: controller %d moved every leadership", controller.id)
            return True
        log.info("controlled shutdown: %d partitions have no other in-sync replica to lead them",
                 len(response.remaining_partitions))
    log.warning("controlled shutdown did not complete; shutting down anyway")
    return False
