"""Kafka's AclAuthorizer over ACLs kept in ZooKeeper (or the embedded store, same layout).

``authorizer.class.name`` names it as Kafka does (``kafka.security.authorizer.AclAuthorizer``, or
the deprecated ``kafka.security.auth.SimpleAclAuthorizer``). Every ACL is read into memory at
start; both change paths (``/kafka-acl-changes``, ``/kafka-acl-extended-changes``) are followed
and each notice re-reads the resource it names, so an ACL written through any broker (or by
kafka-acls.sh against ZooKeeper) holds here within a watch round trip.

The rules (``authorize``): a super user may do anything. Otherwise the ACLs that apply to a
resource are the LITERAL ones of its name, the LITERAL ``*`` of its type and the PREFIXED ones
whose prefix starts its name. None at all: ``allow.everyone.if.no.acl.found`` decides. Else a
matching DENY (principal equal or ``User:*``, host equal or ``*``, operation equal or ``All``)
refuses; else a matching ALLOW grants, where Describe is also granted by Read, Write, Delete
and Alter, and DescribeConfigs by AlterConfigs.
"""
from __future__ import annotations

import functools
import ipaddress
import logging
import threading
from collections.abc import Callable

from kbroker.clock import wall_ms
from kbroker.config.broker import BrokerConfig
from kbroker.config.errors import ConfigError
from kbroker.protocol.messages.acls import AclOperation, PatternType, PermissionType, ResourceType
from kbroker.security.principal import KafkaPrincipal, Session
from zk_compat import acls as zk_acls
from zk_compat.acls import AclEntry, ResourcePattern
from zk_compat.store import ChildrenWatch, MetadataStore, NoNodeError

log = logging.getLogger(__name__)
audit = logging.getLogger("kbroker.authorizer")

CLASS_NAMES = ("kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer")
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"

# an allowed operation that also grants another (Kafka's AclAuthorizer implicit allows)
_IMPLIED_BY: dict[str, tuple[str, ...]] = {
    "DESCRIBE": ("DESCRIBE", "READ", "WRITE", "DELETE", "ALTER"),
    "DESCRIBE_CONFIGS": ("DESCRIBE_CONFIGS", "ALTER_CONFIGS"),
}

Binding = tuple[ResourcePattern, AclEntry]


@functools.lru_cache(maxsize=4096)
def java_host(address: str) -> str:
    """The peer address as Kafka's ``InetAddress.getHostAddress`` prints it: IPv6 uncompressed
    (``0:0:0:0:0:0:0:1``), IPv4 as is."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)  # Java sees an IPv4 peer on a dual-stack socket as Inet4Address
    if ip.version == 6:
        return ":".join(format(int(group, 16), "x") for group in ip.exploded.split(":"))
    return str(ip)


class Authorizer:
    def __init__(self, config: BrokerConfig, store: MetadataStore) -> None:
        self.config = config
        self.store = store
        self.super_users = frozenset(p.strip() for p in config.super_users.split(";") if p.strip())
        self.allow_if_no_acls = bool(config.allow_everyone_if_no_acl_found)
        # (resource type, pattern type) -> name -> ACLs; values replaced whole, read without the lock
        self._cache: dict[tuple[str, str], dict[str, frozenset[AclEntry]]] = {}
        # (resource type, name) -> the ACL sets that apply; dropped whole on any change
        self._matches: dict[tuple[str, str], list[frozenset[AclEntry]]] = {}
        # (principal, client address, operation, resource type, name) -> decision; dropped whole on any change
        self._decisions: dict[tuple[KafkaPrincipal, str, AclOperation, ResourceType, str], bool] = {}
        self._lock = threading.RLock()
        self._watches: list[ChildrenWatch] = []
        self._last_seq: dict[str, int] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Create the ACL paths, read every ACL, then follow both change paths. Blocking."""
        zk_acls.ensure_acl_paths(self.store)
        with self._lock:
            for pattern in list(zk_acls.all_patterns(self.store)):
                self._reload(pattern)
        for changes_path in (zk_acls.ACL_CHANGES_PATH, zk_acls.EXTENDED_ACL_CHANGES_PATH):
            self._watches.append(ChildrenWatch(self.store, changes_path, self._follower(changes_path)))
        log.info("ACL authorizer started: %d resources with ACLs, super users %s, allow.everyone.if.no.acl.found=%s",
                 sum(len(v) for v in self._cache.values()), sorted(self.super_users) or "none",
                 str(self.allow_if_no_acls).lower())

    def stop(self) -> None:
        for watch in self._watches:
            watch.stop()
        self._watches.clear()

    # -- following the store -------------------------------------------------------------------

    def _reload(self, pattern: ResourcePattern) -> None:
        try:
            entries, _ = zk_acls.read_acls(self.store, pattern)
        except ValueError as exc:
            log.error("ACLs of %s skipped, its znode is unreadable: %s", pattern, exc)
            entries = frozenset()
        self._put(pattern, entries)

    def _put(self, pattern: ResourcePattern, entries: frozenset[AclEntry]) -> None:
        with self._lock:
            key = (pattern.resource_type, pattern.pattern_type)
            table = dict(self._cache.get(key, {}))
            if entries:
                table[pattern.name] = entries
            else:
                table.pop(pattern.name, None)
            self._cache[key] = table
            self._matches = {}
            self._decisions = {}

    def _follower(self, changes_path: str) -> Callable[[list[str] | None, object], None]:
        def follow(children: list[str] | None, event: object) -> None:
            self._on_changes(changes_path, children)
        return follow

    def _on_changes(self, changes_path: str, children: list[str] | None) -> None:
        names = sorted((zk_acls.sequence_number(c), c) for c in children or () if c.startswith(zk_acls.CHANGE_PREFIX))
        with self._lock:
            last = self._last_seq.get(changes_path, -1)
            for seq, child in names:
                if seq <= last:
                    continue
                last = seq
                try:
                    data, _ = self.store.get(f"{changes_path}/{child}")
                    pattern = zk_acls.decode_change(changes_path, data)
                except NoNodeError:
                    continue
                except ValueError as exc:
                    log.error("ACL change notice %s/%s skipped: %s", changes_path, child, exc)
                    continue
                try:
                    self._reload(pattern)
                except Exception:
                    log.exception("re-reading the ACLs of %s failed", pattern)
            self._last_seq[changes_path] = last
        try:
            zk_acls.purge_old_notices(self.store, changes_path, [c for _, c in names], wall_ms())
        except Exception as exc:  # another broker purges too; nothing depends on it
            log.debug("purging old ACL change notices failed: %s", exc)

    # -- deciding ------------------------------------------------------------------------------

    def matching_acls(self, resource_type: str, name: str) -> list[frozenset[AclEntry]]:
        """The ACL sets that apply to a resource: its literal name, the literal ``*``, prefixes."""
        matches = self._matches
        found = matches.get((resource_type, name))
        if found is None:
            found = self._find_acls(resource_type, name)
            if len(matches) >= 65536:
                matches.clear()
            matches[(resource_type, name)] = found
        return found

    def _find_acls(self, resource_type: str, name: str) -> list[frozenset[AclEntry]]:
        out = []
        literal = self._cache.get((resource_type, "LITERAL"))
        if literal:
            for key in (name, WILDCARD):
                found = literal.get(key)
                if found:
                    out.append(found)
        prefixed = self._cache.get((resource_type, "PREFIXED"))
        if prefixed:
            out.extend(entries for prefix, entries in prefixed.items() if name.startswith(prefix))
        return out

    def authorize(self, session: Session, operation: AclOperation, resource_type: ResourceType, name: str,
                  log_denied: bool = True) -> bool:
        key = (session.principal, session.client_address, operation, resource_type, name)
        decisions = self._decisions
        allowed = decisions.get(key)
        if allowed is None:
            allowed = self._decide(session, operation, resource_type, name)
            if len(decisions) >= 65536:
                decisions.clear()
            decisions[key] = allowed
        if not allowed and log_denied and audit.isEnabledFor(logging.INFO):
            audit.info("Principal = %s is Denied Operation = %s from host = %s on resource = %s:LITERAL:%s",
                       session.principal, zk_acls.pascal_case(operation.name), session.client_address,
                       zk_acls.pascal_case(resource_type.name), name)
        return allowed

    def _decide(self, session: Session, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        principal = str(session.principal)
        if principal in self.super_users:
            return True
        op = operation.name
        rtype = resource_type.name
        acl_sets = self.matching_acls(rtype, name)
        if not acl_sets:
            allowed = self.allow_if_no_acls
        else:
            host = java_host(session.client_address)
            principals = (principal, WILDCARD_PRINCIPAL)
            hosts = (host, WILDCARD, session.client_address)
            denied = any(e.permission == "DENY" and e.principal in principals and e.host in hosts
                         and e.operation in (op, "ALL") for entries in acl_sets for e in entries)
            if denied:
                allowed = False
            else:
                ops = _IMPLIED_BY.get(op, (op,))
                allowed = any(e.permission == "ALLOW" and e.principal in principals and e.host in hosts
                              and (e.operation in ops or e.operation == "ALL") for entries in acl_sets for e in entries)
        return allowed

    def authorize_by_resource_type(self, session: Session, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Whether some resource of the type may be used for ``operation`` (Kafka 2.8's
        authorizeByResourceType, KAFKA-10619): what InitProducerId asks for idempotence."""
        principal = str(session.principal)
        if principal in self.super_users:
            return True
        op = operation.name
        rtype = resource_type.name
        principals = (principal, WILDCARD_PRINCIPAL)
        hosts = (java_host(session.client_address), WILDCARD, session.client_address)

        def names(pattern_type: str, permission: str) -> set[str]:
            table = self._cache.get((rtype, pattern_type), {})
            return {name for name, entries in table.items()
                    if any(e.permission == permission and e.principal in principals and e.host in hosts
                           and e.operation in (op, "ALL") for e in entries)}

        deny_literal = names("LITERAL", "DENY")
        if WILDCARD in deny_literal:
            return False
        if self.allow_if_no_acls:
            return True
        deny_prefixed = names("PREFIXED", "DENY")

        def denied_by_prefix(name: str) -> bool:
            return any(name.startswith(p) for p in deny_prefixed)

        if any(not denied_by_prefix(p) for p in names("PREFIXED", "ALLOW")):
            return True
        return any(not (n in deny_literal or denied_by_prefix(n)) for n in names("LITERAL", "ALLOW"))

    # -- administering -------------------------------------------------------------------------

    def all_bindings(self) -> list[Binding]:
        out: list[Binding] = []
        for (rtype, ptype), table in list(self._cache.items()):
            for name, entries in table.items():
                pattern = ResourcePattern(rtype, name, ptype)
                out.extend((pattern, e) for e in entries)
        return out

    def describe(self, flt: AclFilter) -> list[Binding]:
        return [b for b in self.all_bindings() if flt.matches(*b)]

    def create(self, bindings: list[Binding]) -> None:
        """Add ACLs (blocking: store writes). Grouped per resource, one CAS update each."""
        by_pattern: dict[ResourcePattern, set[AclEntry]] = {}
        for pattern, entry in bindings:
            by_pattern.setdefault(pattern, set()).add(entry)
        for pattern, entries in by_pattern.items():
            add = frozenset(entries)

            def grow(current: frozenset[AclEntry], add: frozenset[AclEntry] = add) -> frozenset[AclEntry]:
                return current | add

            self._put(pattern, zk_acls.update_acls(self.store, pattern, grow))

    def delete(self, filters: list[AclFilter]) -> list[list[Binding]]:
        """Remove the ACLs each filter matches (blocking); returns what each filter removed."""
        removed: list[list[Binding]] = [[] for _ in filters]
        patterns = {p for p, _ in self.all_bindings() if any(f.matches_pattern(p) for f in filters)}
        for pattern in sorted(patterns, key=str):
            gone: set[AclEntry] = set()

            def drop(current: frozenset[AclEntry], pattern: ResourcePattern = pattern,
                     gone: set[AclEntry] = gone) -> frozenset[AclEntry]:
                gone.clear()
                gone.update(e for e in current if any(f.matches(pattern, e) for f in filters))
                return current - gone

            new = zk_acls.update_acls(self.store, pattern, drop)
            self._put(pattern, new)
            for entry in gone:
                for i, f in enumerate(filters):
                    if f.matches(pattern, entry):
                        removed[i].append((pattern, entry))
        return removed


class AclFilter:
    """Kafka's AclBindingFilter: wire codes in, ``matches`` over stored bindings. ANY (or null
    strings) matches everything; pattern type MATCH with a name matches the literal name, the
    literal ``*`` and every prefix of the name."""

    def __init__(self, resource_type: int, name: str | None, pattern_type: int, principal: str | None,
                 host: str | None, operation: int, permission: int) -> None:
        self.resource_type = resource_type
        self.name = name
        self.pattern_type = pattern_type
        self.principal = principal
        self.host = host
        self.operation = operation
        self.permission = permission

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and _code(ResourceType, pattern.resource_type) != self.resource_type:
            return False
        ptype = _code(PatternType, pattern.pattern_type)
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != ptype:
            return False
        if self.name is None:
            return True
        if self.pattern_type == PatternType.ANY or self.pattern_type == ptype:
            return self.name == pattern.name
        if ptype == PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD
        return self.name.startswith(pattern.name)

    def matches(self, pattern: ResourcePattern, entry: AclEntry) -> bool:
        return (self.matches_pattern(pattern)
                and (self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation == AclOperation.ANY or _code(AclOperation, entry.operation) == self.operation)
                and (self.permission == PermissionType.ANY
                     or _code(PermissionType, entry.permission) == self.permission))


def _code(enum_cls: type[ResourceType] | type[PatternType] | type[AclOperation] | type[PermissionType],
          name: str) -> int:
    try:
        return int(enum_cls[name])
    except KeyError:
        return 0


def build_authorizer(config: BrokerConfig, store: MetadataStore) -> Authorizer | None:
    """None when ``authorizer.class.name`` is empty: every request is allowed, as in Kafka. Kafka's
    two ZooKeeper authorizer names select the ACL authorizer; any other name is a ConfigError."""
    name = (config.authorizer_class_name or "").strip()
    if not name:
        return None
    if name not in CLASS_NAMES:
        raise ConfigError(f"authorizer.class.name: {name!r} is not an authorizer kbroker has; "
                          f"use {CLASS_NAMES[0]} (or the deprecated {CLASS_NAMES[1]})")
    return Authorizer(config, store)
