"""TLS for listeners and inter-broker clients from Kafka's ``ssl.*`` keys with PEM key material
(KIP-651): ``ssl.keystore.type=PEM`` with ``ssl.keystore.location`` (a file holding the private key
and the certificate chain) or inline ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key``,
``ssl.key.password`` for an encrypted key, ``ssl.truststore.type=PEM`` with
``ssl.truststore.location`` or inline ``ssl.truststore.certificates``, ``ssl.client.auth``,
``ssl.enabled.protocols``, ``ssl.cipher.suites``, ``ssl.endpoint.identification.algorithm``.

The SSL principal is the client certificate's subject as Java's ``X500Principal.getName()``
renders it (RFC 2253: most specific RDN first, no spaces, unknown attributes as ``OID=#hex``),
passed through ``ssl.principal.mapping.rules``.
"""
from __future__ import annotations

import os
import re
import ssl
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kbroker.security.principal import ANONYMOUS, KafkaPrincipal


class Settings(Protocol):
    """A listener's settings (kbroker.security.listeners.ListenerConfig)."""
    name: str

    def get(self, key: str, default: str = "") -> str: ...

    def get_list(self, key: str) -> list[str]: ...

    def has_override(self, key: str) -> bool: ...


class TlsConfigError(ValueError):
    """Unusable key material or TLS settings; the message never holds a key or password."""


_PROTOCOL_VERSIONS = {
    "TLSV1": ssl.TLSVersion.TLSv1, "TLSV1.1": ssl.TLSVersion.TLSv1_1,
    "TLSV1.2": ssl.TLSVersion.TLSv1_2, "TLSV1.3": ssl.TLSVersion.TLSv1_3,
}


def _versions(ctx: ssl.SSLContext, enabled: list[str], where: str) -> None:
    versions = []
    for name in enabled:
        version = _PROTOCOL_VERSIONS.get(name.upper())
        if version is None:
            raise TlsConfigError(f"{where}: ssl.enabled.protocols: unknown protocol {name!r} "
                                 "(TLSv1.2 and TLSv1.3 are supported)")
        versions.append(version)
    if versions:
        try:
            ctx.minimum_version = min(versions)
            ctx.maximum_version = max(versions)
        except ValueError as exc:
            raise TlsConfigError(f"{where}: ssl.enabled.protocols {enabled}: {exc}") from None


def _load_keystore(ctx: ssl.SSLContext, settings: Settings, where: str) -> None:
    password = settings.get("ssl.key.password") or None
    location = settings.get("ssl.keystore.location")
    try:
        if location:
            ctx.load_cert_chain(location, password=password)
            return
        chain = settings.get("ssl.keystore.certificate.chain")
        key = settings.get("ssl.keystore.key")
        if not chain or not key:
            raise TlsConfigError(f"{where}: no keystore (ssl.keystore.location, or ssl.keystore.certificate.chain "
                                 "and ssl.keystore.key)")
        # load_cert_chain reads files only: a private file, removed at once
        fd, path = tempfile.mkstemp(prefix="kbroker-keystore-", suffix=".pem")
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(_pem_text(key) + "\n" + _pem_text(chain) + "\n")
            ctx.load_cert_chain(path, password=password)
        finally:
            os.unlink(path)
    except ssl.SSLError as exc:
        raise TlsConfigError(f"{where}: the keystore could not be loaded ({exc.reason or exc.__class__.__name__}; "
                             "is ssl.key.password right, and is it a PEM key with its certificate?)") from None
    except OSError as exc:
        raise TlsConfigError(f"{where}: ssl.keystore.location {location!r}: {exc.strerror}") from None


def keystore_identity(settings: Settings) -> tuple[str, frozenset[str]]:
    """The subject (RFC 2253, as Java writes it) and subject alternative names of a PEM keystore's certificate:
    what a keystore swapped in at run time must keep (Kafka's SslFactory CertificateEntries.ensureCompatible)."""
    from cryptography import x509
    location = settings.get("ssl.keystore.location")
    try:
        text = open(location).read() if location else _pem_text(settings.get("ssl.keystore.certificate.chain"))
        cert = x509.load_pem_x509_certificate(text[text.index("-----BEGIN CERTIFICATE-----"):].encode())
    except (OSError, ValueError) as exc:
        raise TlsConfigError(f"listener {settings.name}: no certificate in the keystore ({exc})") from None
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        sans = frozenset(str(getattr(n, "value", n)) for n in names)
    except x509.ExtensionNotFound:
        sans = frozenset()
    return java_dn(cert.subject), sans


def _pem_text(text: str) -> str:
    """Inline PEM in a properties file often has its line breaks escaped or lost: put them back."""
    text = text.replace("\\n", "\n").strip()
    if "\n" in text:
        return text
    return re.sub(r"(-----BEGIN [A-Z ]+-----)(.*?)(-----END [A-Z ]+-----)",
                  lambda m: m.group(1) + "\n" + "\n".join(m.group(2).split()) + "\n" + m.group(3), text)


def _load_truststore(ctx: ssl.SSLContext, settings: Settings, where: str, purpose: ssl.Purpose) -> bool:
    """True when a truststore was configured (else the system's CAs are used)."""
    location = settings.get("ssl.truststore.location")
    inline = settings.get("ssl.truststore.certificates")
    try:
        if location:
            ctx.load_verify_locations(cafile=location)
            return True
        if inline:
            ctx.load_verify_locations(cadata=_pem_text(inline))
            return True
    except ssl.SSLError as exc:
        raise TlsConfigError(f"{where}: the truststore could not be loaded ({exc.reason})") from None
    except OSError as exc:
        raise TlsConfigError(f"{where}: ssl.truststore.location {location!r}: {exc.strerror}") from None
    ctx.load_default_certs(purpose)
    return False


def _ciphers(ctx: ssl.SSLContext, settings: Settings, where: str) -> None:
    suites = settings.get_list("ssl.cipher.suites")
    if not suites:
        return
    # Java names TLS 1.2 suites TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256; OpenSSL ECDHE-RSA-AES128-GCM-SHA256.
    # Both spellings are accepted; TLS 1.3 suites are not selectable here (OpenSSL enables its own).
    names = [_OPENSSL_NAMES.get(s, s) for s in suites if not s.startswith("TLS_AES") and not s.startswith("TLS_CHACHA")]
    if not names:
        return
    try:
        ctx.set_ciphers(":".join(names))
    except ssl.SSLError:
        raise TlsConfigError(f"{where}: ssl.cipher.suites: none of {suites} is available") from None


_OPENSSL_NAMES = {
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
}


def client_auth(settings: Settings, protocol: str) -> str:
    """none/requested/required; the broker-wide key is ignored on SASL_SSL listeners (KIP-684), only the
    listener-prefixed one counts there."""
    if protocol == "SASL_SSL" and not settings.has_override("ssl.client.auth"):
        return "none"
    return settings.get("ssl.client.auth", "none").lower()


def server_context(settings: Settings, protocol: str = "SSL") -> ssl.SSLContext:
    where = f"listener {settings.name}"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(ctx, settings.get_list("ssl.enabled.protocols"), where)
    _ciphers(ctx, settings, where)
    _load_keystore(ctx, settings, where)
    auth = client_auth(settings, protocol)
    if auth != "none":
        _load_truststore(ctx, settings, where, ssl.Purpose.CLIENT_AUTH)
        ctx.verify_mode = ssl.CERT_REQUIRED if auth == "required" else ssl.CERT_OPTIONAL
    ctx.options |= ssl.OP_NO_COMPRESSION
    return ctx


@dataclass(frozen=True)
class ClientTls:
    context: ssl.SSLContext
    check_hostname: bool


def client_context(settings: Settings) -> ClientTls:
    """For this broker's connections to others' inter-broker listener: the truststore, this broker's
    own certificate when it has one (for ssl.client.auth on the other side), host name checking when
    ssl.endpoint.identification.algorithm is https (Kafka's default), none when it is empty."""
    where = f"inter-broker listener {settings.name}"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    check = settings.get("ssl.endpoint.identification.algorithm").strip().lower() == "https"
    ctx.check_hostname = check
    ctx.verify_mode = ssl.CERT_REQUIRED
    _versions(ctx, settings.get_list("ssl.enabled.protocols"), where)
    _ciphers(ctx, settings, where)
    _load_truststore(ctx, settings, where, ssl.Purpose.SERVER_AUTH)
    if settings.get("ssl.keystore.location") or settings.get("ssl.keystore.certificate.chain"):
        _load_keystore(ctx, settings, where)
    return ClientTls(ctx, check)


# -- the SSL principal --------------------------------------------------------------------------

# The attribute keywords Java's X500Principal.getName(RFC2253) writes; anything else is OID=#hex.
_RFC2253_KEYWORDS = {
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
    "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID",
}


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (i == 0 and ch in "# ") or (i == len(value) - 1 and ch == " "):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _der_length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(body)]) + body


def _attribute_der(attr: Any) -> bytes:
    value = attr.value
    tag = int(getattr(getattr(attr, "_type", None), "value", 12))
    if isinstance(value, bytes):
        data = value
    elif tag == 30:  # BMPString
        data = value.encode("utf-16-be")
    elif tag == 28:  # UniversalString
        data = value.encode("utf-32-be")
    else:
        data = value.encode("utf-8")
    return bytes([tag]) + _der_length(len(data)) + data


def java_dn(name: Any) -> str:
    """A ``cryptography.x509.Name`` as ``X500Principal.getName()`` (RFC 2253) writes it."""
    rdns = []
    for rdn in reversed(list(name.rdns)):
        parts = []
        for attr in rdn:
            keyword = _RFC2253_KEYWORDS.get(attr.oid.dotted_string)
            if keyword is None:
                parts.append(f"{attr.oid.dotted_string}=#{_attribute_der(attr).hex()}")
            else:
                parts.append(f"{keyword}={_escape(str(attr.value))}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


def certificate_dn(der: bytes) -> str:
    from cryptography import x509
    with warnings.catch_warnings():  # keytool's C=Unknown is longer than X.520 allows: render it anyway
        warnings.simplefilter("ignore")
        return java_dn(x509.load_der_x509_certificate(der).subject)


class PrincipalMappingError(ValueError):
    pass


@dataclass(frozen=True)
class _Rule:
    default: bool
    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.default:
            return dn
        assert self.pattern is not None
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(self.replacement, dn)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result


# Kafka's SslPrincipalMapper grammar: DEFAULT, or RULE:<regex>/<replacement>/[LU], separated by commas
# (a comma inside a rule's regex is part of it: the regex runs to its unescaped '/').
_RULE = re.compile(r"\s*((DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?))\s*([,\n]\s*|$)")


def _java_replacement(text: str) -> str:
    """Java's ``$1`` group references and ``\\x`` escapes as Python's re.sub template."""
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            out.append("\\\\" if nxt == "\\" else nxt)
            i += 2
        elif ch == "$" and i + 1 < len(text) and text[i + 1].isdigit():
            j = i + 1
            while j < len(text) and text[j].isdigit():
                j += 1
            out.append(f"\\g<{text[i + 1:j]}>")
            i = j
        else:
            out.append(ch)
            i += 1
    return "".join(out)


class PrincipalMapper:
    """``ssl.principal.mapping.rules``: the first rule whose regex matches the whole DN names the user."""

    def __init__(self, rules_text: str = "DEFAULT") -> None:
        self.text = rules_text.strip() or "DEFAULT"
        self.rules = self._parse(self.text)

    @staticmethod
    def _parse(text: str) -> list[_Rule]:
        rules = []
        pos = 0
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise ValueError(f"ssl.principal.mapping.rules: cannot parse {text[pos:]!r}")
            pos = m.end()
            if m.group(8):
                raise ValueError(f"ssl.principal.mapping.rules: invalid rule {m.group(8)!r} (expected DEFAULT or "
                                 "RULE:pattern/replacement/[LU])")
            if m.group(2):
                rules.append(_Rule(True))
            elif m.group(1):
                try:
                    pattern = re.compile(m.group(3).replace("\\/", "/"))
                except re.error as exc:
                    raise ValueError(f"ssl.principal.mapping.rules: bad pattern {m.group(3)!r}: {exc}") from None
                rules.append(_Rule(False, pattern, _java_replacement(m.group(5).replace("\\/", "/")), m.group(7)))
        return rules

    def name(self, dn: str) -> str:
        for rule in self.rules:
            found = rule.apply(dn)
            if found is not None:
                return found
        raise PrincipalMappingError(f"no ssl.principal.mapping.rules rule applies to {dn!r}")

    def principal(self, der: bytes | None) -> KafkaPrincipal:
        """The principal of a TLS connection: User:<mapped subject>, or ANONYMOUS without a certificate."""
        if not der:
            return ANONYMOUS
        return KafkaPrincipal("User", self.name(certificate_dn(der)))


PrincipalOf = Callable[[bytes | None], KafkaPrincipal]
