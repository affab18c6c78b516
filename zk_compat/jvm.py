"""Java's own forms of a string's hash and of a double, which Kafka's bytes carry: ``String.hashCode`` picks a
group's ``__consumer_offsets`` partition, a transactional id's ``__transaction_state`` partition, a replica fetcher
and every JVM hash map's iteration order (``_jvm_order``); ``Double.toString`` writes DOUBLE config and quota values
("0.5", "100.0", "1.0E7", "-0.0", "1.7976931348623157E308"); ``new BigInteger(130, SecureRandom).toString(36)``
is a SCRAM salt or nonce. One copy each, for zk_compat and kbroker alike."""
from __future__ import annotations

import decimal
import math
import secrets

_MASK32 = 0xFFFFFFFF
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def java_string_hash(s: str) -> int:
    """``java.lang.String.hashCode`` as an unsigned 32-bit value (s[0]*31^(n-1) + ... over UTF-16 code units)."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _MASK32
    return h


def java_int_hash(s: str) -> int:
    """``String.hashCode`` as Java's signed int."""
    h = java_string_hash(s)
    return h - (1 << 32) if h & 0x80000000 else h


def java_double(value: float) -> str:
    """``Double.toString``: plain digits for 10^-3 <= |v| < 10^7 (always with a fraction: "100.0"), else the
    shortest digits in computerized scientific notation ("1.0E7"); signed zero, NaN and the infinities as Java."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    a = abs(float(value))
    if a == 0 or 1e-3 <= a < 1e7:
        return sign + repr(a)  # Python's shortest repr of this range is Java's ("0.5", "100.0", "0.0")
    _, digits, exponent = decimal.Decimal(repr(a)).as_tuple()
    figures = "".join(map(str, digits)).rstrip("0") or "0"
    return f"{sign}{figures[0]}.{figures[1:] or '0'}E{len(digits) - 1 + int(exponent)}"


def random_base36() -> str:
    """Kafka's ``new BigInteger(130, new SecureRandom()).toString(36)`` (ScramFormatter.secureRandomString): the
    salt kafka-configs.sh stores and the SCRAM server's nonce; lower-case digits, no leading zeros, "0" for zero."""
    n = secrets.randbits(130)
    out = ""
    while n:
        n, r = divmod(n, 36)
        out = _BASE36[r] + out
    return out or "0"
