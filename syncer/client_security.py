"""The security settings every aiokafka client of a cluster is given (TLS, SASL), apart from
the connection code that uses them: the TLS context is built once per cluster and shared."""

from __future__ import annotations

import functools
import ssl
from typing import Any

from aiokafka.helpers import create_ssl_context

from syncer.config import ClusterConfig
from syncer.config_security import key_password


def client_options(config: ClusterConfig) -> dict[str, Any]:
    """The security settings of any aiokafka client of this cluster."""
    options: dict[str, Any] = {"security_protocol": config.security_protocol}
    if "SSL" in config.security_protocol:
        options["ssl_context"] = tls_context(config)
    if config.security_protocol.startswith("SASL"):
        options["sasl_mechanism"] = config.sasl_mechanism
        if config.sasl_mechanism == "OAUTHBEARER":
            options["sasl_oauth_token_provider"] = config.sasl_oauth_token_provider
        else:
            options["sasl_plain_username"] = config.sasl_username
            options["sasl_plain_password"] = config.sasl_password
    return options


@functools.cache
def tls_context(config: ClusterConfig) -> ssl.SSLContext:
    """The cluster's TLS context, built on first use and shared by every client of the
    cluster (each lane, the admin client, the group member, the identity producer and
    consumer) rather than loading the CA bundle and key once per client. The files are read
    then: a renewed certificate takes a restart, as it always did for a running client.
    Keyed by the frozen ClusterConfig, which hashes on its settings, not its token provider."""
    context: ssl.SSLContext = create_ssl_context(
        cafile=config.ssl_cafile or None,
        certfile=config.ssl_certfile or None,
        keyfile=config.ssl_keyfile or None,
        password=key_password(config),
    )
    context.check_hostname = config.ssl_check_hostname
    return context
