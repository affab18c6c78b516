"""SCRAM credentials: Kafka's stored form, its derivation from a password, the broker's cache, and
writing them to ``/config/users/<user>``.

Stored form (Kafka's ScramCredentialUtils), one config key per mechanism in the user's entity znode,
next to the user's quotas::

    {"version":1,"config":{"SCRAM-SHA-256":"salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=4096"}}

Never the password: ``SaltedPassword = PBKDF2-HMAC(password, salt, i)``, ``StoredKey = H(HMAC(SP,
"Client Key"))``, ``ServerKey = HMAC(SP, "Server Key")`` (RFC 5802; SHA-256 or SHA-512).

``CredentialCache`` follows the user entities through ``EntityConfigs`` (the znodes, re-read on each
``/config/changes`` notice); ``lookup(mechanism, user)`` is what the SCRAM server asks. A corrupt
value is logged with the user's name (never the value) and that credential is unusable until it is
rewritten; the broker keeps serving.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kbroker.config.broker import BrokerConfig
from kbroker.security.entity_configs import DEFAULT, EntityConfigs, parse_entity_path
from zk_compat.jvm import random_base36
from zk_compat.layout import create_config_change_notification
from zk_compat.store import BadVersionError, MetadataStore, NodeExistsError, NoNodeError
from zk_compat.znodes import ConfigEntityZNode, sanitize_entity_name

log = logging.getLogger(__name__)

# mechanism name -> (hashlib name, the byte AlterUserScramCredentials / Describe use)
SCRAM_MECHANISMS: dict[str, tuple[str, int]] = {"SCRAM-SHA-256": ("sha256", 1), "SCRAM-SHA-512": ("sha512", 2)}
MECHANISM_BY_TYPE = {code: name for name, (_, code) in SCRAM_MECHANISMS.items()}
MIN_ITERATIONS = 4096     # Kafka's ScramMechanism.minIterations (both mechanisms)
MAX_ITERATIONS = 16384    # enforced by AlterUserScramCredentials only
_KEYS = ("salt", "stored_key", "server_key", "iterations")


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:  # the keys are secrets too
        return f"ScramCredential(iterations={self.iterations})"


# -- crypto (Kafka's ScramFormatter) -----------------------------------------------------------

def hash_name(mechanism: str) -> str:
    return SCRAM_MECHANISMS[mechanism][0]


def hmac_digest(mechanism: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hash_name(mechanism)).digest()


def digest(mechanism: str, data: bytes) -> bytes:
    return hashlib.new(hash_name(mechanism), data).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i): PBKDF2-HMAC; Kafka applies no SASLprep."""
    return hashlib.pbkdf2_hmac(hash_name(mechanism), password.encode("utf-8"), salt, iterations)


def client_key(mechanism: str, salted: bytes) -> bytes:
    return hmac_digest(mechanism, salted, b"Client Key")


def server_key(mechanism: str, salted: bytes) -> bytes:
    return hmac_digest(mechanism, salted, b"Server Key")


def credential_from_salted(mechanism: str, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    return ScramCredential(salt, digest(mechanism, client_key(mechanism, salted)), server_key(mechanism, salted),
                           iterations)


def new_salt() -> bytes:
    """What Kafka's tools use: the UTF-8 bytes of a random 130-bit number in base 36."""
    return random_base36().encode()


def make_credential(mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    salt = new_salt() if salt is None else salt
    return credential_from_salted(mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations)


# -- the stored string ---------------------------------------------------------------------------

def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def format_credential(cred: ScramCredential) -> str:
    """Exactly ``salt=%s,stored_key=%s,server_key=%s,iterations=%d`` (standard, padded base64)."""
    return (f"salt={_b64(cred.salt)},stored_key={_b64(cred.stored_key)},server_key={_b64(cred.server_key)},"
            f"iterations={cred.iterations}")


def parse_credential(text: str) -> ScramCredential:
    """Kafka's parser: split on ``,`` and the first ``=``; exactly the four keys. Raises ValueError
    with a message that does not quote the value."""
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError("a field without '='")
        fields[key] = value
    if set(fields) != set(_KEYS) or len(text.split(",")) != len(_KEYS):
        raise ValueError(f"expected exactly the fields {', '.join(_KEYS)}")
    try:
        salt, stored, server = (base64.b64decode(fields[k], validate=True) for k in _KEYS[:3])
    except (binascii.Error, ValueError):
        raise ValueError("a field is not valid base64") from None
    if not fields["iterations"].isdigit():
        raise ValueError("iterations is not a number")
    return ScramCredential(salt, stored, server, int(fields["iterations"]))


# -- the cache -----------------------------------------------------------------------------------

class CredentialCache:
    """SCRAM credentials by mechanism and user name, kept current from the user entity configs."""

    def __init__(self, config: BrokerConfig, entity_configs: EntityConfigs) -> None:
        self.config = config
        self.entity_configs = entity_configs
        self._scram: dict[str, dict[str, ScramCredential]] = {m: {} for m in SCRAM_MECHANISMS}
        self._lock = threading.Lock()
        entity_configs.subscribe(self._on_entity)

    def lookup(self, mechanism: str, user: str) -> ScramCredential | None:
        with self._lock:
            return self._scram.get(mechanism, {}).get(user)

    def users(self, mechanism: str) -> list[str]:
        with self._lock:
            return sorted(self._scram.get(mechanism, {}))

    def _on_entity(self, path: str, configs: dict[str, str]) -> None:
        try:
            user, client = parse_entity_path(path)
        except ValueError:
            return
        if user is None or client is not None or user == DEFAULT:
            return  # credentials belong to plain user entities only (Kafka's UserConfigHandler)
        parsed: dict[str, ScramCredential | None] = {}
        for mechanism in SCRAM_MECHANISMS:
            text = configs.get(mechanism)
            if text is None:
                parsed[mechanism] = None
                continue
            try:
                parsed[mechanism] = parse_credential(text)
            except ValueError as exc:
                log.error("the %s credential of user %r in ZooKeeper is corrupt (%s): that user cannot "
                          "authenticate with %s until it is set again", mechanism, user, exc, mechanism)
                parsed[mechanism] = None
        with self._lock:
            for mechanism, cred in parsed.items():
                if cred is None:
                    self._scram[mechanism].pop(user, None)
                else:
                    self._scram[mechanism][user] = cred


# -- writing -------------------------------------------------------------------------------------

def read_user_config(store: MetadataStore, user: str) -> dict[str, str]:
    entity = sanitize_entity_name(user)
    try:
        data, _ = store.get(ConfigEntityZNode.path("users", entity))
    except NoNodeError:
        return {}
    return ConfigEntityZNode.decode("users", entity, data)


def alter_scram_credentials(store: MetadataStore, user: str, upsert: Mapping[str, ScramCredential],
                            delete: Iterable[str] = ()) -> str:
    """Set and remove SCRAM keys of one user in ``/config/users/<sanitized user>``, keeping every other
    key of that znode (quotas live there too), then create the ``/config/changes`` notification, as
    Kafka's AdminZkClient.changeConfigs does. Works on the embedded store and ZooKeeper alike
    (blocking: off the event loop on ZooKeeper). Returns the notification's path."""
    entity = sanitize_entity_name(user)
    path = ConfigEntityZNode.path("users", entity)
    for _ in range(20):  # read-modify-write with the znode version, retried on a concurrent change
        try:
            data, stat = store.get(path)
            configs = ConfigEntityZNode.decode("users", entity, data)
            version: int | None = stat.version
        except NoNodeError:
            configs, version = {}, None
        for mechanism in delete:
            configs.pop(mechanism, None)
        for mechanism, cred in upsert.items():
            configs[mechanism] = format_credential(cred)
        encoded = ConfigEntityZNode.encode(configs)
        try:
            if version is None:
                store.create(path, encoded, makepath=True)
            else:
                store.set(path, encoded, version)
        except (NodeExistsError, BadVersionError, NoNodeError):
            continue
        return create_config_change_notification(store, f"users/{entity}")
    raise RuntimeError(f"could not update the configs of user {user!r}: they kept changing under us")


def set_scram_password(store: MetadataStore, user: str, mechanism: str, password: str,
                       iterations: int = MIN_ITERATIONS) -> ScramCredential:
    """Store a credential made from a password (tests and tools; the password itself is not kept)."""
    cred = make_credential(mechanism, password, iterations)
    alter_scram_credentials(store, user, {mechanism: cred})
    return cred


def constant_time_equals(a: bytes, b: bytes) -> bool:
    return hmac.compare_digest(a, b)
