"""UpdateMetadata as Kafka's controller sends it: a broker's first request holds every partition, the next ones
only what changed since its last answer (deleted partitions with LeaderDuringDelete, -2), and the broker's
MetadataCache merges them; a new controller epoch starts it over. Sending the whole cluster on every change
made each new topic cost in proportion to the cluster (issue 31)."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kbroker.controller.channel import ControllerChannel
from kbroker.metadata.cache import MetadataCache
from kbroker.metadata.zk_view import LiveBroker, Snapshot
from kbroker.protocol import message_types as msg
from kbroker.protocol.codec import decode_request, encode_request
from zk_compat.znodes import PartitionState


class Peer:
    """The broker's end: decodes each UpdateMetadata as the broker would and applies it to a MetadataCache."""

    def __init__(self) -> None:
        self.cache = MetadataCache()
        self.sent: list[list[tuple[str, int, int]]] = []

    async def request(self, api_key: int, version: int, body: dict) -> SimpleNamespace:
        if api_key == 6:
            _, request = decode_request(encode_request(6, version, 1, "controller-1", body)[4:])
            assert isinstance(request, msg.UpdateMetadataRequest)
            self.sent.append([(t.topic_name, p.partition_index, p.leader)
                              for t in request.topic_states for p in t.partition_states])
            self.cache.update(request)
        return SimpleNamespace(error_code=0, partition_errors=[])

    def close(self) -> None:
        pass


def view(states: dict[tuple[str, int], PartitionState]) -> Snapshot:
    snap = Snapshot(controller_id=1)
    snap.brokers = {b: LiveBroker(b, "127.0.0.1", 9092 + b, None, epoch=b) for b in (1, 2)}
    for (topic, index), state in states.items():
        snap.assignments.setdefault(topic, {})[index] = [1, 2]
        snap.states[(topic, index)] = state
    return snap


def test_only_changes_are_sent_and_the_broker_merges_them() -> None:
    async def run() -> tuple[list[list[tuple[str, int, int]]], MetadataCache]:
        channel = ControllerChannel(1, 30000)
        peer = Peer()
        states = {(t, p): PartitionState(1, 0, [1, 2], 1) for t in ("a", "b") for p in range(3)}

        async def step(snap: Snapshot) -> None:
            channel.sync(snap, 1)
            channel.channels[2].connection = peer  # type: ignore[assignment]
            before = len(peer.sent)
            for _ in range(200):
                await asyncio.sleep(0.005)
                if len(peer.sent) > before:
                    break
            await asyncio.sleep(0.02)

        await step(view(states))
        states[("a", 1)] = PartitionState(2, 1, [2], 1)  # a new leader for one partition
        await step(view(states))
        for p in range(3):
            del states[("b", p)]  # topic b deleted
        await step(view(states))
        channel.stop()
        return peer.sent, peer.cache

    sent, cache = asyncio.run(run())
    assert sent[0] == [(t, p, 1) for t in ("a", "b") for p in range(3)]  # the first request: everything
    assert sent[1:] == [[("a", 1, 2)], [("b", 0, -2), ("b", 1, -2), ("b", 2, -2)]]
    assert sorted(cache.topics) == ["a"] and sorted(cache.partitions) == [("a", 0), ("a", 1), ("a", 2)]
    assert cache.state("a", 1) == PartitionState(2, 1, [2], 1)
    assert cache.live_broker_ids == frozenset({1, 2})


def test_a_new_controller_epoch_starts_the_cache_over() -> None:
    cache = MetadataCache()

    def update(epoch: int, partitions: list[tuple[str, int, int]]) -> None:
        body = {"controller_id": 1, "controller_epoch": epoch, "broker_epoch": -1, "live_brokers": [],
                "topic_states": [{"topic_name": t, "partition_states": [
                    {"partition_index": p, "controller_epoch": epoch, "leader": leader, "leader_epoch": 0,
                     "isr": [1], "zk_version": 0, "replicas": [1], "offline_replicas": []}]}
                    for t, p, leader in partitions]}
        _, request = decode_request(encode_request(6, 6, 1, "controller-1", body)[4:])
        cache.update(request)

    update(1, [("a", 0, 1), ("gone", 0, 1)])
    update(1, [("a", 1, 1)])
    assert sorted(cache.partitions) == [("a", 0), ("a", 1), ("gone", 0)]
    update(2, [("a", 0, 1), ("a", 1, 1)])  # a new controller tells everything: "gone" was deleted meanwhile
    assert sorted(cache.partitions) == [("a", 0), ("a", 1)] and sorted(cache.topics) == ["a"]
