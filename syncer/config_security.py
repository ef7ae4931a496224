"""The rules of one cluster's security settings (TLS files, SASL mechanism and credentials),
checked together with the other settings at load (``syncer.config``)."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from aiokafka.helpers import create_ssl_context

if TYPE_CHECKING:
    from syncer.config import ClusterConfig

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


def check_security(cluster: ClusterConfig, where: str) -> list[str]:
    problems = []
    protocol = cluster.security_protocol
    if protocol not in SECURITY_PROTOCOLS:
        choices = ", ".join(SECURITY_PROTOCOLS)
        return [f"{where}.security_protocol: must be one of {choices}, got {protocol!r}"]
    tls = "SSL" in protocol
    for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        path = getattr(cluster, name)
        if path and not tls:
            problems.append(f"{where}.{name}: needs security_protocol SSL or SASL_SSL")
        elif path and not Path(path).is_file():
            problems.append(f"{where}.{name}: no such file: {path}")
    if bool(cluster.ssl_certfile) != bool(cluster.ssl_keyfile):
        problems.append(f"{where}.ssl_certfile, ssl_keyfile: give both or neither")
    if tls and not problems:
        problems += _check_tls_files(cluster, where)
    mechanism = cluster.sasl_mechanism
    if not protocol.startswith("SASL"):
        if mechanism or cluster.sasl_username:
            problems.append(f"{where}.sasl_mechanism: needs security_protocol SASL_*")
        return problems
    if mechanism not in SASL_MECHANISMS:
        choices = ", ".join(SASL_MECHANISMS)
        problems.append(f"{where}.sasl_mechanism: must be one of {choices}, got {mechanism!r}")
    elif mechanism == "OAUTHBEARER":
        if cluster.sasl_oauth_token_provider is None:
            problems.append(
                f"{where}.sasl_mechanism: OAUTHBEARER needs a token provider, set from Python"
                " (ClusterConfig.sasl_oauth_token_provider)"
            )
    elif not cluster.sasl_username or not cluster.sasl_password:
        problems.append(f"{where}: {mechanism} needs sasl_username and sasl_password")
    return problems


def key_password(cluster: ClusterConfig) -> Callable[[], str]:
    """The key's password as OpenSSL asks for it: a function, so that an encrypted key with
    no password set fails to load rather than asking for one on the terminal."""
    return lambda: cluster.ssl_key_password


def _check_tls_files(cluster: ClusterConfig, where: str) -> list[str]:
    """The CA file, certificate and key loaded as the clients will load them, so that one
    that holds no certificate, a key that does not match or a wrong password is said at
    load (exit 3), not as a traceback at the first connection."""
    try:
        create_ssl_context(cafile=cluster.ssl_cafile or None)
    except (ssl.SSLError, OSError, ValueError) as exc:
        why = _tls_reason(exc, "not PEM certificates")
        return [f"{where}.ssl_cafile: cannot load {cluster.ssl_cafile}: {why}"]
    if not cluster.ssl_certfile:
        return []
    try:
        create_ssl_context(
            certfile=cluster.ssl_certfile,
            keyfile=cluster.ssl_keyfile,
            password=key_password(cluster),
        )
    except (ssl.SSLError, OSError, ValueError) as exc:
        files = f"{cluster.ssl_certfile}, {cluster.ssl_keyfile}"
        why = _tls_reason(exc, "not PEM, or the key's password is wrong or missing")
        return [f"{where}.ssl_certfile, ssl_keyfile: cannot load {files}: {why}"]
    return []


def _tls_reason(exc: Exception, unreadable: str) -> str:
    """OpenSSL's reason in words (``KEY_VALUES_MISMATCH``: the key is not the certificate's)."""
    reason = getattr(exc, "reason", None)
    if reason is None and isinstance(exc, ssl.SSLError) and "PEM lib" in str(exc):
        reason = "PEM lib"  # OpenSSL 3 names no reason for a PEM it cannot read
    known = {
        "NO_CERTIFICATE_OR_CRL_FOUND": "no certificate in it",
        "KEY_VALUES_MISMATCH": "the key is not the certificate's",
        "BAD_DECRYPT": "the key's password is wrong or missing",
        "PEM lib": unreadable,
    }
    if reason in known:
        return known[reason]
    return str(reason or getattr(exc, "strerror", None) or exc)
