"""TLS for the SSL and SASL_SSL listeners and for this broker's connections to the others, from
Kafka's ``ssl.*`` keys, with Python's ``ssl`` (OpenSSL): no cryptography of our own.

Key material is PEM only (``ssl.keystore.type=PEM``, as Kafka 2.7+ accepts): a file holding
the private key and certificate chain (``ssl.keystore.location``), or the PEM text itself in
``ssl.keystore.certificate.chain`` + ``ssl.keystore.key``. PEM text is handed to OpenSSL
through a memfd, so a key given in the config is never written to a file. A private key file
that every user may read is refused at start-up with its path and mode.

Principals: a client certificate's subject, as an RFC 2253 name, through
``ssl.principal.mapping.rules`` (Kafka's KIP-371 rules) gives ``User:<name>``; a connection
with no certificate is ``User:ANONYMOUS``.
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["TlsError", "server_context", "client_context", "principal_of", "PrincipalRules",
           "check_key_file", "uses_tls", "check_tls"]

TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class TlsError(ValueError):
    """The TLS configuration cannot be used; the message names the key and, for a file, its path."""


def uses_tls(security_protocol: str) -> bool:
    return security_protocol.upper() in TLS_PROTOCOLS


def check_key_file(path: str, key: str) -> None:
    """Refuse a private key or credentials file that others may read. Raises TlsError."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise TlsError(f"{key}={path}: {e.strerror}") from None
    if mode & stat.S_IRWXO:  # the group may read it (root:appliance 0640, as systemd/README.md says)
        raise TlsError(f"{key}={path}: mode {stat.S_IMODE(mode):04o} lets every user read it; "
                       f"chmod o-rwx it (0600 owned by the broker's user, or 0640 with its group)")


@contextlib.contextmanager
def _pem_path(text: str) -> Iterator[str]:
    """A path OpenSSL can open that holds ``text``, never on a disk (a memfd)."""
    fd = os.memfd_create("appliance-pem", os.MFD_CLOEXEC)
    try:
        os.write(fd, text.encode())
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def _get(config: Any, key: str) -> Any:
    v = config[key]
    return v if v not in ("", None) else None


def _versions(ctx: ssl.SSLContext, config: Any) -> None:
    wanted = sorted(_VERSIONS[v] for v in config["ssl.enabled.protocols"])
    ctx.minimum_version, ctx.maximum_version = wanted[0], wanted[-1]
    suites = _get(config, "ssl.cipher.suites")
    if suites:
        try:
            ctx.set_ciphers(":".join(suites))
        except ssl.SSLError:
            raise TlsError(f"ssl.cipher.suites={','.join(suites)}: OpenSSL knows none of these "
                           "cipher suites (use OpenSSL's names, e.g. ECDHE-RSA-AES256-GCM-SHA384)") from None


def _load_keystore(ctx: ssl.SSLContext, config: Any, required: bool) -> None:
    location = _get(config, "ssl.keystore.location")
    chain, key = _get(config, "ssl.keystore.certificate.chain"), _get(config, "ssl.keystore.key")
    password = _get(config, "ssl.key.password")
    if location and (chain or key):
        raise TlsError("ssl.keystore.location and ssl.keystore.certificate.chain/ssl.keystore.key "
                       "are both set: give one")
    try:
        if location:
            check_key_file(location, "ssl.keystore.location")
            ctx.load_cert_chain(location, password=password)
        elif chain or key:
            if not (chain and key):
                raise TlsError("ssl.keystore.certificate.chain and ssl.keystore.key go together")
            with _pem_path(chain) as cpath, _pem_path(key) as kpath:
                ctx.load_cert_chain(cpath, kpath, password=password)
        elif required:
            raise TlsError("a TLS listener needs this broker's key and certificate: set "
                           "ssl.keystore.location (a PEM file with both)")
    except ssl.SSLError as e:
        what = f"ssl.keystore.location={location}" if location else "ssl.keystore.certificate.chain/key"
        raise TlsError(f"{what}: {_ssl_reason(e)} (wrong ssl.key.password, a key that does not match "
                       "the certificate, or not PEM)") from None
    except FileNotFoundError as e:
        raise TlsError(f"ssl.keystore.location={location}: {e.strerror}") from None


def _load_truststore(ctx: ssl.SSLContext, config: Any) -> bool:
    """True when trusted certificates were given (else the system's CAs are used)."""
    location = _get(config, "ssl.truststore.location")
    certs = _get(config, "ssl.truststore.certificates")
    try:
        if location:
            ctx.load_verify_locations(cafile=location)
            return True
        if certs:
            ctx.load_verify_locations(cadata=certs)
            return True
    except (ssl.SSLError, OSError) as e:
        what = f"ssl.truststore.location={location}" if location else "ssl.truststore.certificates"
        raise TlsError(f"{what}: {getattr(e, 'strerror', None) or _ssl_reason(e)}") from None
    ctx.load_default_certs()
    return False


def _ssl_reason(e: BaseException) -> str:
    return getattr(e, "reason", None) or str(e)


def server_context(config: Any) -> ssl.SSLContext:
    """The context a TLS listener serves with. Raises TlsError naming the key at fault."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(ctx, config)
    _load_keystore(ctx, config, required=True)
    auth = str(config["ssl.client.auth"]).lower()
    ctx.verify_mode = _CLIENT_AUTH[auth]
    if auth != "none":
        _load_truststore(ctx, config)
    # one handshake per connection; resumption tickets would outlive a revoked certificate
    ctx.options |= ssl.OP_NO_TICKET
    return ctx


def client_context(config: Any) -> ssl.SSLContext:
    """The context this broker connects to other brokers with (their TLS inter-broker
    listener): their certificate checked against the trust store, their host name too unless
    ``ssl.endpoint.identification.algorithm`` is empty; its own key store offered when set
    (mutual TLS). Raises TlsError."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _versions(ctx, config)
    _load_truststore(ctx, config)
    ctx.check_hostname = str(config["ssl.endpoint.identification.algorithm"] or "").lower() == "https"
    _load_keystore(ctx, config, required=False)
    return ctx


# -- principals ----------------------------------------------------------------------------

_RULE = re.compile(r"RULE:((?:\\.|[^/\\])*)/((?:\\.|[^/\\])*)/([LU])?(?:,|$)|DEFAULT(?:,|$)")


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""


class PrincipalRules:
    """``ssl.principal.mapping.rules``: the first rule whose pattern matches the whole subject
    name rewrites it; DEFAULT keeps it. No rule matching is Kafka's error too: the name is kept
    whole. Raises TlsError for a malformed list."""

    def __init__(self, text: str) -> None:
        self.rules: list[_Rule] = []
        text = (text or "DEFAULT").strip()
        pos = 0
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None:
                raise TlsError(f"ssl.principal.mapping.rules={text!r}: cannot read a rule at "
                               f"{text[pos:]!r} (RULE:pattern/replacement/[LU] or DEFAULT)")
            if m.group(0).startswith("DEFAULT"):
                self.rules.append(_Rule(None))
            else:
                try:
                    pattern = re.compile(m.group(1).replace("\\/", "/"))
                except re.error as e:
                    raise TlsError(f"ssl.principal.mapping.rules: {m.group(1)!r}: {e}") from None
                # Java's $1 is Python's \1
                replacement = re.sub(r"\$(\d)", r"\\\1", m.group(2).replace("\\/", "/"))
                self.rules.append(_Rule(pattern, replacement, m.group(3) or ""))
            pos = m.end()
            while pos < len(text) and text[pos] in " \n\t":
                pos += 1

    def apply(self, name: str) -> str:
        for rule in self.rules:
            if rule.pattern is None:
                return name
            if rule.pattern.fullmatch(name):
                out = rule.pattern.sub(rule.replacement, name, count=1)
                return out.lower() if rule.case == "L" else out.upper() if rule.case == "U" else out
        return name


def subject_name(der: bytes) -> str:
    """A DER certificate's subject as RFC 2253 writes it (most specific first: CN=...,O=...),
    the form Kafka's rules match."""
    from cryptography import x509
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


def principal_of(ssl_object: Any, rules: PrincipalRules) -> str | None:
    """The principal name of a TLS connection's client certificate, or None without one."""
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if not der:
        return None
    return rules.apply(subject_name(der))


def check_tls(config: Any) -> None:
    """Start-up's check of the TLS settings a broker will use: a TLS listener's key store
    (loaded, so a wrong password or a mismatched key is said now, not at the first client),
    the client context when the inter-broker listener uses TLS, and the principal rules.
    Raises TlsError naming the key."""
    PrincipalRules(config["ssl.principal.mapping.rules"])
    if any(uses_tls(ep.security_protocol) for ep in config.listener_endpoints):
        server_context(config)
    inter = config.inter_broker_listener
    if any(ep.listener == inter and uses_tls(ep.security_protocol) for ep in config.listener_endpoints):
        client_context(config)
    if any(ep.listener == inter and ep.security_protocol.startswith("SASL_") for ep in config.listener_endpoints):
        from appliance.security.sasl_client import login_of
        mechanism = config["sasl.mechanism.inter.broker.protocol"]
        try:
            login_of(config.listener_value(inter, f"{mechanism.lower()}.sasl.jaas.config"))
        except ValueError as e:
            raise TlsError(f"listener.name.{inter.lower()}.{mechanism.lower()}.sasl.jaas.config: {e}") from None
