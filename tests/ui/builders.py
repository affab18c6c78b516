"""Hand-built snapshots and a fake clock for the tests of kbroker.ui (no broker, no ZooKeeper)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from kbroker.ui.model import Commit, Group, Member, Partition, Rates, Snapshot, Storage, Topic


class FakeClock:
    """Seconds since the epoch, moved by hand."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    @property
    def ms(self) -> int:
        return int(self.now * 1000)


def snapshot(taken_ms: int, ends: Mapping[tuple[str, int], int], *, commits: Iterable[Commit] = (),
             groups: Iterable[Group] = (), rates: Rates | None = None) -> Snapshot:
    """A snapshot of one broker holding every partition of ``ends`` (topic, partition) -> log end."""
    topics: dict[str, list[Partition]] = {}
    for (topic, partition), end in sorted(ends.items()):
        topics.setdefault(topic, []).append(Partition(topic, partition, 1, (1,), (1,), 0, end, -1))
    return Snapshot(taken_ms=taken_ms, brokers=(), controller=1,
                    topics=tuple(Topic(name, False, 1, tuple(ps)) for name, ps in topics.items()),
                    log_dirs=(), groups=tuple(groups), commits=tuple(commits), rates=rates)


def commit(group: str, topic: str, partition: int, offset: int, ts_ms: int, storage: Storage = "kafka") -> Commit:
    return Commit(group=group, storage=storage, topic=topic, partition=partition, offset=offset, timestamp_ms=ts_ms)


def kafka_group(name: str, *members: tuple[str, str, Iterable[tuple[str, int]]]) -> Group:
    """A Stable Kafka-stored group of members (client id, host, assignment)."""
    return Group(name=name, storage="kafka", state="Stable",
                 members=tuple(Member(f"{client}-{i}", client, host, tuple(assignment))
                               for i, (client, host, assignment) in enumerate(members)))
