"""The SASL authenticator alone (security/sasl.py): scramp's client logs in; a wrong proof, a
nonce that is not the server's, a replayed client-final, channel binding, malformed tokens and
PLAIN's authorization id are refused with SASL_AUTHENTICATION_FAILED."""

from __future__ import annotations

import base64

import pytest
import scramp

from appliance.errors import ErrorCode
from appliance.security.credentials import ScramCredential, derive_credential, plain_users
from appliance.security.sasl import COMPLETE, FAILED, SaslAuthenticator

MECH = "SCRAM-SHA-256"


def _credential(password: str, mechanism: str = MECH) -> ScramCredential:
    import hashlib
    salt = b"0123456789abcdef"
    hash_name = "sha256" if mechanism == MECH else "sha512"
    return derive_credential(mechanism, salt, hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, 4096), 4096)


def _auth(users: dict | None = None) -> SaslAuthenticator:
    creds = {("alice", MECH): _credential("pw"), ("bob", "SCRAM-SHA-512"): _credential("pw2", "SCRAM-SHA-512")}
    a = SaslAuthenticator(("PLAIN", MECH, "SCRAM-SHA-512"), lambda: users or {"alice": "pw"},
                          lambda u, m: creds.get((u, m)))
    return a


@pytest.mark.parametrize("user, password, mechanism", [("alice", "pw", MECH), ("bob", "pw2", "SCRAM-SHA-512")])
def test_scramp_client_logs_in(user, password, mechanism):
    a = _auth()
    assert a.handshake(1, mechanism)["error_code"] == 0
    c = scramp.ScramClient([mechanism], user, password)
    code, _, server_first = a.authenticate(c.get_client_first().encode())
    assert code == 0
    c.set_server_first(server_first.decode())
    code, _, server_final = a.authenticate(c.get_client_final().encode())
    assert code == 0 and a.state == COMPLETE and a.principal == f"User:{user}"
    c.set_server_final(server_final.decode())  # raises unless the server knew the password


def _first_and_final(a: SaslAuthenticator, password: str = "pw") -> tuple[scramp.ScramClient, str]:
    a.handshake(1, MECH)
    c = scramp.ScramClient([MECH], "alice", password)
    _, _, server_first = a.authenticate(c.get_client_first().encode())
    c.set_server_first(server_first.decode())
    return c, c.get_client_final()


def test_wrong_password_and_tampered_messages_fail():
    a = _auth()
    _, final = _first_and_final(a, "wrong")
    code, msg, _ = a.authenticate(final.encode())
    assert code == ErrorCode.SASL_AUTHENTICATION_FAILED and a.state == FAILED and "pw" not in msg
    # another nonce than the server's
    a = _auth()
    _, final = _first_and_final(a)
    attrs = dict(x.split("=", 1) for x in final.split(","))
    bad = final.replace(f"r={attrs['r']}", f"r={attrs['r'][:-4]}AAAA")
    assert a.authenticate(bad.encode())[0] == ErrorCode.SASL_AUTHENTICATION_FAILED
    # a client-final replayed on a new exchange (its nonce is the old server's)
    b = _auth()
    _first_and_final(b)
    assert b.authenticate(final.encode())[0] == ErrorCode.SASL_AUTHENTICATION_FAILED
    # channel binding asked for
    c = _auth()
    c.handshake(1, MECH)
    assert c.authenticate(b"p=tls-unique,,n=alice,r=abc")[0] == ErrorCode.SASL_AUTHENTICATION_FAILED
    # garbage and a proof that is not Base64
    for token in (b"\xff\xfe", b"n,,r=abc", b"n,,n=alice"):
        d = _auth()
        d.handshake(1, MECH)
        assert d.authenticate(token)[0] == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_librdkafka_2_0_nonce_is_accepted_as_kafka_accepts_it():
    """librdkafka 2.0.x sends r=<its nonce><the server's whole nonce>; Kafka checks endsWith."""
    import hashlib
    import hmac
    a = _auth()
    a.handshake(1, MECH)
    cnonce = "clientnonce123"
    _, _, server_first = a.authenticate(f"n,,n=alice,r={cnonce}".encode())
    attrs = dict(x.split("=", 1) for x in server_first.decode().split(","))
    salted = hashlib.pbkdf2_hmac("sha256", b"pw", base64.b64decode(attrs["s"]), int(attrs["i"]))
    without_proof = f"c=biws,r={cnonce}{attrs['r']}"
    auth = f"n=alice,r={cnonce},{server_first.decode()},{without_proof}".encode()
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth, "sha256").digest()
    proof = bytes(x ^ y for x, y in zip(client_key, signature, strict=True))
    code, _, _ = a.authenticate(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())
    assert code == 0 and a.state == COMPLETE


@pytest.mark.parametrize("token", [b"\0alice\0bad", b"bob\0alice\0pw", b"\0alice", b"\0nobody\0pw"])
def test_plain_refusals(token):
    a = _auth()
    a.handshake(1, "PLAIN")
    assert a.authenticate(token)[0] == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_plain_users_of_a_jaas_line():
    jaas = 'PlainLoginModule required username="admin" password="x" user_admin="x" user_b="q\\"uote";'
    assert plain_users(jaas) == {"admin": "x", "b": 'q"uote'}


def test_reauthentication_keeps_the_principal():
    a = _auth({"alice": "pw", "mallory": "m"})
    a.handshake(1, "PLAIN")
    assert a.authenticate(b"\0alice\0pw")[0] == 0
    a.handshake(1, "PLAIN")  # KIP-368: again, on the same connection
    assert a.authenticate(b"\0mallory\0m")[0] == ErrorCode.SASL_AUTHENTICATION_FAILED
