"""Certificates made at test time with the `cryptography` package: a CA, certificates it signs
(a broker's for 127.0.0.1 and localhost, clients'), and PEM files written with mode 600."""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Authority", "Issued", "name"]

_DAY = datetime.timedelta(days=1)


def name(**parts: str) -> x509.Name:
    """x509 name from keyword parts in most-significant-first order: C, O, OU, CN."""
    oids = {"C": NameOID.COUNTRY_NAME, "O": NameOID.ORGANIZATION_NAME,
            "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "CN": NameOID.COMMON_NAME}
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in parts.items()])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())  # quick to make, as strong as RSA-3072


@dataclass
class Issued:
    """A certificate and its key, written as PEM files under ``directory``."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    chain: list[x509.Certificate]

    def cert_pem(self) -> str:
        return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in [self.cert, *self.chain])

    def key_pem(self, password: str | None = None) -> str:
        enc = (serialization.BestAvailableEncryption(password.encode()) if password
               else serialization.NoEncryption())
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      enc).decode()

    def write(self, directory: Path, stem: str, password: str | None = None, mode: int = 0o600) -> tuple[Path, Path, Path]:
        """(key+chain PEM, chain PEM, key PEM), each with ``mode``."""
        directory.mkdir(parents=True, exist_ok=True)
        out = []
        for suffix, text in (("keystore.pem", self.key_pem(password) + self.cert_pem()),
                             ("crt.pem", self.cert_pem()), ("key.pem", self.key_pem(password))):
            p = directory / f"{stem}.{suffix}"
            p.write_text(text)
            os.chmod(p, mode)
            out.append(p)
        return tuple(out)  # type: ignore[return-value]


class Authority:
    """A self-signed CA that issues certificates."""

    def __init__(self, common_name: str = "appliance test CA") -> None:
        self.key = _key()
        now = datetime.datetime.now(datetime.UTC)
        subject = name(O="appliance tests", CN=common_name)
        self.cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - _DAY).not_valid_after(now + 30 * _DAY)
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))

    def pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.pem())
        return path

    def issue(self, subject: x509.Name, hosts: tuple[str, ...] = (), expired: bool = False) -> Issued:
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        start, end = (now - 10 * _DAY, now - _DAY) if expired else (now - _DAY, now + 30 * _DAY)
        b = (x509.CertificateBuilder().subject_name(subject).issuer_name(self.cert.subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(start).not_valid_after(end)
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                   ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if hosts:
            alt = []
            for h in hosts:
                try:
                    alt.append(x509.IPAddress(ipaddress.ip_address(h)))
                except ValueError:
                    alt.append(x509.DNSName(h))
            b = b.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        return Issued(b.sign(self.key, hashes.SHA256()), key, [])
