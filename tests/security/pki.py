"""A throwaway PKI for the TLS tests: a CA, a broker certificate (SAN 127.0.0.1 and localhost),
client certificates, and an untrusted CA's client certificate. PEM files in one directory."""
from __future__ import annotations

import datetime
import ipaddress
import warnings
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

KEY_PASSWORD = "key-secret"


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca: Path                 # the CA certificate (truststore for clients and brokers)
    broker: Path             # PEM keystore: PKCS#8 key + certificate chain, unencrypted
    broker_cert: Path
    broker_key: Path
    broker_encrypted: Path   # the same keystore with the key encrypted with KEY_PASSWORD
    client_cert: Path        # CN=writeuser,OU=Unknown,... signed by the CA
    client_key: Path
    other_cert: Path         # CN=reader,OU=Ops,O=Example,C=GB
    other_key: Path
    rogue_cert: Path         # CN=rogue signed by a CA nobody trusts
    rogue_key: Path


def _name(**parts: str) -> x509.Name:
    oids = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "O": NameOID.ORGANIZATION_NAME,
            "L": NameOID.LOCALITY_NAME, "ST": NameOID.STATE_OR_PROVINCE_NAME, "C": NameOID.COUNTRY_NAME}
    # written C first as keytool does, so the RFC 2253 rendering starts with CN
    order = ["C", "ST", "L", "O", "OU", "CN"]
    with warnings.catch_warnings():  # keytool's C=Unknown: longer than X.520 allows, as Kafka's docs show
        warnings.simplefilter("ignore")
        return x509.Name([x509.NameAttribute(oids[k], parts[k], _validate=False) for k in order if k in parts])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(subject: x509.Name, key, issuer: x509.Name, issuer_key, *, ca: bool = False,
          san: list | None = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
               .not_valid_after(now + datetime.timedelta(days=30))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
            critical=True)
        builder = builder.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    else:
        builder = builder.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                                        critical=False)
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key, password: str | None = None) -> bytes:
    enc = (serialization.BestAvailableEncryption(password.encode()) if password
           else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name(CN="kbroker test CA", O="kbroker")
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    broker_key = _key()
    broker = _cert(_name(CN="localhost", O="kbroker"), broker_key, ca_name, ca_key,
                   san=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    client_key = _key()
    client = _cert(_name(CN="writeuser", OU="Unknown", O="Unknown", L="Unknown", ST="Unknown", C="Unknown"),
                   client_key, ca_name, ca_key)
    other_key = _key()
    other = _cert(_name(CN="reader", OU="Ops", O="Example", C="GB"), other_key, ca_name, ca_key)
    rogue_ca_key = _key()
    rogue_ca_name = _name(CN="nobody trusts me")
    rogue_key = _key()
    rogue = _cert(_name(CN="rogue"), rogue_key, rogue_ca_name, rogue_ca_key)

    def write(name: str, data: bytes) -> Path:
        path = directory / name
        path.write_bytes(data)
        path.chmod(0o600)
        return path

    return Pki(
        dir=directory,
        ca=write("ca.pem", _pem(ca)),
        broker=write("broker-keystore.pem", _key_pem(broker_key) + _pem(broker) + _pem(ca)),
        broker_cert=write("broker.pem", _pem(broker) + _pem(ca)),
        broker_key=write("broker.key", _key_pem(broker_key)),
        broker_encrypted=write("broker-keystore-enc.pem", _key_pem(broker_key, KEY_PASSWORD) + _pem(broker)),
        client_cert=write("client.pem", _pem(client)),
        client_key=write("client.key", _key_pem(client_key)),
        other_cert=write("other.pem", _pem(other)),
        other_key=write("other.key", _key_pem(other_key)),
        rogue_cert=write("rogue.pem", _pem(rogue)),
        rogue_key=write("rogue.key", _key_pem(rogue_key)),
    )
