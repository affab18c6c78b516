"""Kafka's ACLs in ZooKeeper, as ``AclAuthorizer`` keeps them (``ZkAclStore``, ``AclEntry``,
``LiteralAclChangeStore``, ``ExtendedAclChangeStore`` in Kafka's ZkData.scala).

* LITERAL patterns: ``/kafka-acl/<Type>/<name>``; PREFIXED ones:
  ``/kafka-acl-extended/prefixed/<Type>/<name>``. ``<Type>`` is the resource type in PascalCase
  (``Topic``, ``Group``, ``Cluster``, ``TransactionalId``, ``DelegationToken``); the wildcard
  ``*`` is a LITERAL node named ``*``; the cluster is always ``kafka-cluster``.
* A resource znode holds ``{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
  "operation":"Read","host":"*"}]}`` (keys in that order, names in PascalCase). It is deleted
  when its last ACL goes; writes are compare-and-set on the znode version, retried.
* After each change a persistent-sequential notice: ``/kafka-acl-changes/acl_changes_<seq>``
  holding ``TOPIC:name`` (Java enum name, ``:``, resource name) for a LITERAL pattern,
  ``/kafka-acl-extended-changes/acl_changes_<seq>`` holding
  ``{"version":1,"resourceType":"TOPIC","name":"x","patternType":"PREFIXED"}`` for the others.
  Every broker re-reads the named resource.

Values here are Kafka's Java enum names as strings (``TOPIC``, ``READ``, ``ALLOW``, ``LITERAL``);
the broker maps them to wire codes. Imports nothing of kbroker.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from zk_compat import _json
from zk_compat.store import BadVersionError, MetadataStore, NodeExistsError, NoNodeError

log = logging.getLogger(__name__)

ACL_PATH = "/kafka-acl"
ACL_CHANGES_PATH = "/kafka-acl-changes"
EXTENDED_ACL_PATH = "/kafka-acl-extended"
EXTENDED_ACL_CHANGES_PATH = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
MAX_UPDATE_RETRIES = 10          # AclAuthorizer's maxUpdateRetries
CHANGE_EXPIRATION_MS = 15 * 60 * 1000  # ZkNodeChangeNotificationListener's changeExpirationMs

# Java enum names of what an ACL znode may name (ResourceType without UNKNOWN/ANY)
RESOURCE_TYPES = ("TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID", "DELEGATION_TOKEN")
OPERATIONS = ("ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION",
              "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE")
PERMISSIONS = ("DENY", "ALLOW")
STORED_PATTERN_TYPES = ("LITERAL", "PREFIXED")


def pascal_case(enum_name: str) -> str:
    """``TRANSACTIONAL_ID`` -> ``TransactionalId`` (Kafka's SecurityUtils.toPascalCase)."""
    return "".join(part.capitalize() for part in enum_name.split("_"))


def _enum_name(text: str, names: tuple[str, ...]) -> str:
    """A PascalCase (or any casing, with or without ``_``) name -> its enum name; ``UNKNOWN`` when
    none fits, as Kafka's fromString does."""
    key = text.replace("_", "").upper()
    for name in names:
        if name.replace("_", "") == key:
            return name
    return "UNKNOWN"


@dataclass(frozen=True)
class ResourcePattern:
    resource_type: str   # TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN
    name: str
    pattern_type: str    # LITERAL or PREFIXED

    def __str__(self) -> str:
        return f"ResourcePattern(resourceType={self.resource_type}, name={self.name}, patternType={self.pattern_type})"


@dataclass(frozen=True)
class AclEntry:
    principal: str       # User:alice
    permission: str      # ALLOW or DENY
    operation: str       # READ, ALL, ...
    host: str            # an IP literal or *

    def json_map(self) -> dict[str, str]:
        return {"principal": self.principal, "permissionType": pascal_case(self.permission),
                "operation": pascal_case(self.operation), "host": self.host}


# ---------------------------------------------------------------------------------------------
# paths and bytes

def _base(pattern_type: str) -> str:
    if pattern_type == "LITERAL":
        return ACL_PATH
    if pattern_type == "PREFIXED":
        return f"{EXTENDED_ACL_PATH}/prefixed"
    raise ValueError(f"ACLs are stored for LITERAL and PREFIXED patterns only, not {pattern_type}")


def type_path(pattern_type: str, resource_type: str) -> str:
    return f"{_base(pattern_type)}/{pascal_case(resource_type)}"


def resource_path(pattern: ResourcePattern) -> str:
    if not pattern.name or "/" in pattern.name:
        raise ValueError(f"invalid resource name {pattern.name!r}")
    return f"{type_path(pattern.pattern_type, pattern.resource_type)}/{pattern.name}"


def encode_acls(entries: Iterator[AclEntry] | set[AclEntry] | frozenset[AclEntry] | list[AclEntry]) -> bytes:
    """The znode bytes for a resource's ACLs (sorted, so a rewrite of the same set is the same bytes)."""
    ordered = sorted(entries, key=lambda e: (e.principal, e.permission, e.operation, e.host))
    return _json.dumps({"version": 1, "acls": [e.json_map() for e in ordered]})


def decode_acls(data: bytes | None, path: str) -> frozenset[AclEntry]:
    """Parse a resource znode; raises ValueError on anything Kafka would not read. Unknown
    operation or permission names decode as UNKNOWN (such entries match nothing)."""
    if data is None or not bytes(data):
        return frozenset()
    obj = _json.loads(data, path)
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a JSON object")
    if obj.get("version") != 1:
        raise ValueError(f"{path}: ACL znode version {obj.get('version')!r}, expected 1")
    acls = obj.get("acls")
    if not isinstance(acls, list):
        raise ValueError(f"{path}: 'acls' must be a list")
    out = set()
    for item in acls:
        if not isinstance(item, dict):
            raise ValueError(f"{path}: an ACL must be a JSON object")
        fields = []
        for key in ("principal", "permissionType", "operation", "host"):
            value = item.get(key)
            if not isinstance(value, str):
                raise ValueError(f"{path}: ACL field {key!r} must be a string")
            fields.append(value)
        principal, permission, operation, host = fields
        kind, sep, _ = principal.partition(":")
        if not sep or not kind:
            raise ValueError(f"{path}: principal {principal!r} is not Type:name")
        out.add(AclEntry(principal, _enum_name(permission, PERMISSIONS), _enum_name(operation, OPERATIONS), host))
    return frozenset(out)


def encode_change(pattern: ResourcePattern) -> tuple[str, bytes]:
    """(the sequential node's path prefix, its bytes) for a change to ``pattern``."""
    if pattern.pattern_type == "LITERAL":
        return f"{ACL_CHANGES_PATH}/{CHANGE_PREFIX}", f"{pattern.resource_type}:{pattern.name}".encode()
    data = _json.dumps({"version": 1, "resourceType": pattern.resource_type, "name": pattern.name,
                        "patternType": pattern.pattern_type})
    return f"{EXTENDED_ACL_CHANGES_PATH}/{CHANGE_PREFIX}", data


def decode_change(changes_path: str, data: bytes | None) -> ResourcePattern:
    """The resource a notice under ``changes_path`` names; ValueError when it names none."""
    if data is None:
        raise ValueError(f"{changes_path}: empty ACL change notice")
    if changes_path == ACL_CHANGES_PATH:
        text = bytes(data).decode("utf-8", "replace")
        kind, sep, name = text.partition(":")
        rtype = _enum_name(kind, RESOURCE_TYPES)
        if not sep or rtype == "UNKNOWN":
            raise ValueError(f"{changes_path}: ACL change notice {text!r} names no resource")
        return ResourcePattern(rtype, name, "LITERAL")
    obj = _json.loads(data, changes_path)
    if not isinstance(obj, dict) or obj.get("version") != 1:
        raise ValueError(f"{changes_path}: unexpected extended ACL change notice")
    rtype = _enum_name(str(obj.get("resourceType", "")), RESOURCE_TYPES)
    ptype = _enum_name(str(obj.get("patternType", "")), STORED_PATTERN_TYPES)
    resource_name = obj.get("name")
    if rtype == "UNKNOWN" or ptype == "UNKNOWN" or not isinstance(resource_name, str):
        raise ValueError(f"{changes_path}: extended ACL change notice names no resource")
    return ResourcePattern(rtype, resource_name, ptype)


def sequence_number(child: str) -> int:
    return int(child[len(CHANGE_PREFIX):]) if child.startswith(CHANGE_PREFIX) else -1


# ---------------------------------------------------------------------------------------------
# store operations

def ensure_acl_paths(store: MetadataStore) -> None:
    """What ``KafkaZkClient.createAclPaths`` creates when an AclAuthorizer starts: both ACL roots
    with a directory per resource type, and both change paths (null data)."""
    paths = [ACL_PATH, f"{EXTENDED_ACL_PATH}/prefixed"]
    paths += [type_path(p, t) for p in STORED_PATTERN_TYPES for t in RESOURCE_TYPES]
    paths += [ACL_CHANGES_PATH, EXTENDED_ACL_CHANGES_PATH]
    for path in paths:
        try:
            store.create(path, None, makepath=True)
        except NodeExistsError:
            pass


def read_acls(store: MetadataStore, pattern: ResourcePattern) -> tuple[frozenset[AclEntry], int]:
    """A resource's ACLs and its znode version (-1 when there is no znode)."""
    path = resource_path(pattern)
    try:
        data, stat = store.get(path)
    except NoNodeError:
        return frozenset(), -1
    return decode_acls(data, path), stat.version


def _children(store: MetadataStore, path: str) -> list[str]:
    try:
        return store.get_children(path)
    except NoNodeError:
        return []


def all_patterns(store: MetadataStore) -> Iterator[ResourcePattern]:
    """Every resource that has an ACL znode."""
    for ptype in STORED_PATTERN_TYPES:
        for child in _children(store, _base(ptype)):
            rtype = _enum_name(child, RESOURCE_TYPES)
            if rtype == "UNKNOWN" or pascal_case(rtype) != child:
                continue
            for name in _children(store, type_path(ptype, rtype)):
                yield ResourcePattern(rtype, name, ptype)


def update_acls(store: MetadataStore, pattern: ResourcePattern,
                change: Callable[[frozenset[AclEntry]], frozenset[AclEntry]]) -> frozenset[AclEntry]:
    """Apply ``change`` to the resource's ACLs with compare-and-set on the znode version (up to
    MAX_UPDATE_RETRIES attempts on a concurrent write); create the znode for a first ACL, delete
    it when none remains, and write the change notice when the set changed. Returns the new set.
    A corrupt znode counts as empty (it is rewritten). Raises the store's errors otherwise."""
    path = resource_path(pattern)
    for attempt in range(MAX_UPDATE_RETRIES):
        try:
            current, version = read_acls(store, pattern)
        except ValueError as exc:
            log.error("ACL znode %s unreadable, rewriting it: %s", path, exc)
            current, version = frozenset(), store.get(path)[1].version
        new = change(current)
        if new == current and version != -1:
            return current
        try:
            if not new:
                if version == -1:
                    return new
                store.delete(path, version)
            elif version == -1:
                store.create(path, encode_acls(new), makepath=True)
            else:
                store.set(path, encode_acls(new), version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            time.sleep(min(0.5, 0.01 * (2 ** attempt)))
            continue
        write_change_notice(store, pattern)
        return new
    raise BadVersionError(f"{path}: {MAX_UPDATE_RETRIES} concurrent updates in a row, giving up", path=path)


def write_change_notice(store: MetadataStore, pattern: ResourcePattern) -> str:
    prefix, data = encode_change(pattern)
    return store.create(prefix, data, sequence=True, makepath=True)


def purge_old_notices(store: MetadataStore, changes_path: str, children: list[str], now_ms: int) -> None:
    """Delete notices older than CHANGE_EXPIRATION_MS (as every Kafka broker's listener does),
    oldest first, stopping at the first younger one (sequence order is creation order)."""
    for child in sorted(children, key=sequence_number):
        path = f"{changes_path}/{child}"
        try:
            stat = store.exists(path)
            if stat is not None and now_ms - stat.ctime <= CHANGE_EXPIRATION_MS:
                return
            store.delete(path)
        except NoNodeError:
            pass
