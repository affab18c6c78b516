"""The key order in which Kafka 2.8's JVM writes JSON objects.

Kafka builds most znode JSON from Scala or Java hash maps and lets Jackson walk them, so the
key order on disk is the map's iteration order: a function of the keys' ``String.hashCode`` and
of the map implementation, not of the order the source code lists the keys in. No reader depends
on it, but we want our bytes to equal Kafka's, so this module reproduces those iteration orders:

* ``scala_mutable_map_order``: ``scala.collection.mutable.HashMap`` of Scala 2.13 (the
  ``kafka_2.13`` build): a power-of-two table indexed by ``h ^ (h >>> 16)``, iterated by bucket,
  each bucket kept sorted by that hash. Checked against ``get`` output of real 2.8+ clusters for
  ``/brokers/ids/<id>`` and ``/brokers/topics/<t>`` (including a 12-partition topic, which
  exercises the table growth).
* ``scala_immutable_map_order``: ``scala.collection.immutable.Map`` of Scala 2.13: up to four
  entries keep insertion order (``Map1``..``Map4``); more become a CHAMP trie keyed by the
  "improved" hash, iterated node by node (a node's own entries first, then its sub-nodes).
  Checked against the partition-state znode of a real cluster.
* ``java_properties_order``: ``java.util.Properties`` on JDK 9 and later, which stores its
  entries in a ``ConcurrentHashMap`` (topic and entity configs). JDK 8 iterated a ``Hashtable``
  instead and gives a different order; Kafka 2.8 recommends Java 11, so we follow JDK 9+.
  Checked against JDK 17 + Jackson.
* ``java_hashmap_order``: ``java.util.HashMap`` (``Collectors.toMap``), for broker features.
  Checked against JDK 17.

Full 32-bit hash collisions and tree bins (eight or more keys in one bucket) are not modelled;
neither can happen with the key sets Kafka writes.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from zk_compat.jvm import java_string_hash

_MASK32 = 0xFFFFFFFF
__all__ = ["java_hashmap_order", "java_properties_order", "java_string_hash", "scala_immutable_map_order",
           "scala_mutable_map_order"]


def _signed(h: int) -> int:
    return h - (1 << 32) if h & 0x80000000 else h


# --- Scala 2.13 mutable.HashMap ---------------------------------------------------------------

def _scala_table_size_for(capacity: int) -> int:
    # Integer.highestOneBit(max(capacity - 1, 4)) * 2, capped at 2^30
    return min((1 << (max(capacity - 1, 4).bit_length() - 1)) * 2, 1 << 30)


def scala_mutable_map_order(keys: Sequence[str], *, initial: int = 0,
                            later: Iterable[str] = ()) -> list[str]:
    """Iteration order of ``mutable.Map(k1 -> v1, ...)`` (``initial`` = how many of ``keys``
    were passed to the factory; 0 means an empty ``mutable.Map()`` that ``keys`` were added to
    one by one) after the keys in ``later`` were added with ``+=``."""
    all_keys = list(keys) + list(later)
    if initial:
        capacity = int((initial + 1) / 0.75)
    else:
        capacity = 16  # HashMap.defaultInitialCapacity
    size = _scala_table_size_for(capacity)
    count = 0
    seen: set[str] = set()
    for k in all_keys:
        if k in seen:
            continue
        if count + 1 >= int(size * 0.75):  # put0 grows before inserting
            size *= 2
        seen.add(k)
        count += 1
    hashed = []
    for k in seen:
        h = java_string_hash(k)
        h ^= h >> 16
        hashed.append((h & (size - 1), _signed(h), k))
    return [k for _, _, k in sorted(hashed)]


# --- Scala 2.13 immutable.Map (Map1..Map4, then CHAMP HashMap) ---------------------------------

def _scala_improve(h: int) -> int:
    h = (h + (~(h << 9) & _MASK32)) & _MASK32
    h ^= h >> 14
    h = (h + (h << 4)) & _MASK32
    h ^= h >> 10
    return h


def _champ_order(entries: list[tuple[int, str]], shift: int) -> list[str]:
    if shift >= 32:  # identical improved hashes: a collision node keeps insertion order
        return [k for _, k in entries]
    groups: dict[int, list[tuple[int, str]]] = {}
    for h, k in entries:
        groups.setdefault((h >> shift) & 0x1F, []).append((h, k))
    payload = [g[0][1] for _, g in sorted(groups.items()) if len(g) == 1]
    nodes: list[str] = []
    for _, g in sorted(groups.items()):
        if len(g) > 1:
            nodes.extend(_champ_order(g, shift + 5))
    return payload + nodes


def scala_immutable_map_order(keys: Sequence[str]) -> list[str]:
    """Iteration order of an immutable ``Map`` built from ``keys`` in this order."""
    unique = list(dict.fromkeys(keys))
    if len(unique) <= 4:
        return unique
    return _champ_order([(_scala_improve(java_string_hash(k)), k) for k in unique], 0)


# --- java.util.Properties (JDK 9+: a ConcurrentHashMap inside) --------------------------------

def java_properties_order(keys: Sequence[str]) -> list[str]:
    """Iteration order of ``new Properties()`` after ``setProperty`` of ``keys`` in order."""
    n = 16            # new ConcurrentHashMap<>(8) sizes its table to 16
    size_ctl = 12
    table: list[list[tuple[int, str]]] = [[] for _ in range(n)]
    count = 0
    present: set[str] = set()
    for k in keys:
        if k in present:
            continue  # a replaced value keeps its node
        present.add(k)
        h = java_string_hash(k)
        h = (h ^ (h >> 16)) & 0x7FFFFFFF
        table[h & (n - 1)].append((h, k))
        count += 1
        while count >= size_ctl:
            table = _chm_transfer(table, n)
            n *= 2
            size_ctl = n - (n >> 2)
    return [k for bin_ in table for _, k in bin_]


def _chm_transfer(table: list[list[tuple[int, str]]], n: int) -> list[list[tuple[int, str]]]:
    """ConcurrentHashMap.transfer: split each bin into the low and high halves of a table
    twice as large. The trailing run of nodes that go to the same half is moved as is; the
    nodes before it are prepended one by one, which reverses them."""
    new: list[list[tuple[int, str]]] = [[] for _ in range(2 * n)]
    for i, bin_ in enumerate(table):
        if not bin_:
            continue
        last_run = len(bin_) - 1
        run_bit = bin_[last_run][0] & n
        while last_run > 0 and (bin_[last_run - 1][0] & n) == run_bit:
            last_run -= 1
        low = list(bin_[last_run:]) if run_bit == 0 else []
        high = list(bin_[last_run:]) if run_bit != 0 else []
        for node in bin_[:last_run]:
            if node[0] & n:
                high.insert(0, node)
            else:
                low.insert(0, node)
        new[i] = low
        new[i + n] = high
    return new


# --- java.util.HashMap ------------------------------------------------------------------------

def java_hashmap_order(keys: Sequence[str]) -> list[str]:
    """Iteration order of a default ``new HashMap<>()`` after ``put`` of ``keys`` in order.
    Resizing splits each bucket keeping relative order, so the final table decides."""
    unique = list(dict.fromkeys(keys))
    n = 16
    while len(unique) > n * 3 // 4:
        n *= 2
    ranked = []
    for i, k in enumerate(unique):
        h = java_string_hash(k)
        ranked.append(((h ^ (h >> 16)) & (n - 1), i, k))
    return [k for _, _, k in sorted(ranked)]
