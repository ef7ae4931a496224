"""Certificates for the test bed, made with openssl when a bed starts: a CA, a broker
certificate for 127.0.0.1 and localhost, and a client certificate (for mutual TLS). Brokers
read them as PEM (Kafka's ssl.keystore.type=PEM); no keytool, no keystore passwords."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from syncer.testbed.errors import TestbedError

DAYS = "30"


@dataclass(frozen=True)
class Certificates:
    ca: Path  # the CA certificate: clients' ssl_cafile, brokers' truststore
    broker: Path  # the broker's key and certificate chain in one PEM file
    client_cert: Path
    client_key: Path


def make_certificates(directory: Path) -> Certificates:
    """Make (once) the bed's CA, broker and client certificates under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    certs = Certificates(
        directory / "ca.pem",
        directory / "broker.pem",
        directory / "client.pem",
        directory / "client.key",
    )
    if all(p.exists() for p in (certs.ca, certs.broker, certs.client_cert, certs.client_key)):
        return certs
    if shutil.which("openssl") is None:
        raise TestbedError("openssl is not installed: the test bed needs it for TLS")
    ca_key = directory / "ca.key"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", DAYS,
        "-subj", "/CN=syncer test bed CA", "-keyout", ca_key, "-out", certs.ca,
    )  # fmt: skip
    broker_key, broker_cert = _signed(
        directory, "broker", "/CN=localhost", "subjectAltName=IP:127.0.0.1,DNS:localhost", ca_key
    )
    certs.broker.write_text(broker_key.read_text() + broker_cert.read_text())
    client_key, client_cert = _signed(directory, "client", "/CN=syncer", "", ca_key)
    client_key.replace(certs.client_key)
    client_cert.replace(certs.client_cert)
    return certs


def _signed(
    directory: Path, name: str, subject: str, extension: str, ca_key: Path
) -> tuple[Path, Path]:
    key, csr, cert = (directory / f"{name}{s}" for s in (".key.pem", ".csr", ".crt.pem"))
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", key, "-out", csr
    )  # fmt: skip
    ext = directory / f"{name}.ext"
    ext.write_text(extension + "\n" if extension else "basicConstraints=CA:FALSE\n")
    _openssl(
        "x509", "-req", "-in", csr, "-CA", directory / "ca.pem", "-CAkey", ca_key,
        "-CAcreateserial", "-days", DAYS, "-extfile", ext, "-out", cert,
    )  # fmt: skip
    return key, cert


def _openssl(*args: str | Path) -> None:
    result = subprocess.run(
        ["openssl", *map(str, args)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["?"]
        raise TestbedError(f"openssl {args[0]} failed: {tail[0]}")
