"""The rules of one cluster's security settings (TLS files, SASL mechanism and credentials),
checked together with the other settings at load (``syncer.config``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

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
