"""Security settings: checked at load, secrets read from files and kept out of reprs."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path
from typing import Any

import pytest

from syncer.clusters import Cluster, client_options
from syncer.config import Config
from syncer.errors import ConfigError
from syncer.testbed.tls import Certificates, make_certificates

SECRET = "hunter2-and-more-secret"


def load(remote: dict[str, Any]) -> Config:
    return Config.from_dict(
        {
            "local": {"bootstrap_servers": "local:9092"},
            "remotes": [{"name": "east", "bootstrap_servers": "east:9092", **remote}],
            "topics": {"include": ["t"]},
        }
    )


def problems(remote: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(remote)
    return caught.value.problems


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    """The test bed's CA and client certificate (openssl)."""
    return make_certificates(tmp_path_factory.mktemp("certs"))


def test_sasl_ssl_with_scram_and_a_password_file(tmp_path: Path, certs: Certificates) -> None:
    secret = tmp_path / "pw"
    secret.write_text(SECRET + "\n")
    config = load(
        {
            "security_protocol": "SASL_SSL",
            "ssl_cafile": str(certs.ca),
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": "mirror",
            "sasl_password_file": str(secret),
        }
    )
    east = config.remotes[0]
    assert east.sasl_password == SECRET
    assert SECRET not in repr(config) and SECRET not in str(config)


def test_bad_security_settings_are_named(tmp_path: Path) -> None:
    assert problems({"security_protocol": "TLS"}) == [
        "remotes[0].security_protocol: must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL,"
        " got 'TLS'"
    ]
    assert problems({"security_protocol": "SSL", "ssl_cafile": "/nope/ca.pem"}) == [
        "remotes[0].ssl_cafile: no such file: /nope/ca.pem"
    ]
    assert problems({"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512"}) == [
        "remotes[0]: SCRAM-SHA-512 needs sasl_username and sasl_password"
    ]
    assert problems({"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"}) == [
        "remotes[0].sasl_mechanism: OAUTHBEARER needs a token provider, set from Python"
        " (ClusterConfig.sasl_oauth_token_provider)"
    ]
    assert problems({"sasl_oauth_token_provider": "x"}) == [
        "remotes[0].sasl_oauth_token_provider: can only be set from Python"
    ]
    both = problems(
        {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_username": "u",
            "sasl_password": SECRET,
            "sasl_password_file": str(tmp_path / "missing"),
        }
    )
    assert both == ["remotes[0].sasl_password: set it or sasl_password_file, not both"]
    assert not any(SECRET in p for p in both)
    missing = problems({"sasl_password_file": str(tmp_path / "missing")})
    assert missing == [
        f"remotes[0].sasl_password_file: cannot read {tmp_path / 'missing'}:"
        " No such file or directory"
    ]


def test_client_options_verify_hostnames_and_carry_credentials() -> None:
    east = load(
        {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_username": "mirror",
            "sasl_password": SECRET,
        }
    ).remotes[0]
    options = client_options(east)
    assert options["ssl_context"].check_hostname is True
    assert options["sasl_plain_password"] == SECRET and options["sasl_mechanism"] == "SCRAM-SHA-256"
    relaxed = client_options(dataclasses.replace(east, ssl_check_hostname=False))
    assert relaxed["ssl_context"].check_hostname is False
    assert client_options(load({}).remotes[0]) == {"security_protocol": "PLAINTEXT"}


async def test_a_cluster_has_one_tls_context_for_all_its_clients() -> None:
    east = load({"security_protocol": "SSL"}).remotes[0]
    context = client_options(east)["ssl_context"]
    # each lane, the admin client, the group member: the same context, loaded once
    assert client_options(east)["ssl_context"] is context
    assert client_options(dataclasses.replace(east))["ssl_context"] is context
    lanes = [Cluster(east, role="remote", lane=lane) for lane in (0, 1, 2)]
    assert all(lane._client._ssl_context is context for lane in lanes)
    # other settings, another context
    relaxed = client_options(dataclasses.replace(east, ssl_check_hostname=False))
    assert relaxed["ssl_context"] is not context
    west = load({"security_protocol": "SSL", "name": "west"}).remotes[0]
    assert client_options(west)["ssl_context"] is not context


def test_tls_files_that_do_not_load_are_named_at_load(tmp_path: Path, certs: Certificates) -> None:
    """Loaded as the clients load them: a file that holds no certificate, a key that is not
    the certificate's, an encrypted key with a wrong or no password are one line each (exit
    3), not a traceback at the first connection, and no password is asked for on a
    terminal."""
    empty = tmp_path / "ca.pem"
    empty.write_text("no certificate here\n")
    assert problems({"security_protocol": "SSL", "ssl_cafile": str(empty)}) == [
        f"remotes[0].ssl_cafile: cannot load {empty}: no certificate in it"
    ]
    mutual = {"security_protocol": "SSL", "ssl_cafile": str(certs.ca)}
    mutual |= {"ssl_certfile": str(certs.client_cert), "ssl_keyfile": str(certs.client_key)}
    assert load(mutual).remotes[0].ssl_keyfile == str(certs.client_key)
    other_key = certs.ca.parent / "ca.key"  # the CA's key: not the client certificate's
    files = f"{certs.client_cert}, {other_key}"
    assert problems(mutual | {"ssl_keyfile": str(other_key)}) == [
        f"remotes[0].ssl_certfile, ssl_keyfile: cannot load {files}:"
        " the key is not the certificate's"
    ]
    locked = tmp_path / "client.key"
    encrypt = ["pkey", "-in", str(certs.client_key), "-aes256", "-passout", "pass:right"]
    subprocess.run(["openssl", *encrypt, "-out", str(locked)], check=True)
    assert load(mutual | {"ssl_keyfile": str(locked), "ssl_key_password": "right"})
    for password in ({"ssl_key_password": "wrong"}, {}):
        (problem,) = problems(mutual | {"ssl_keyfile": str(locked), **password})
        assert problem.startswith(
            f"remotes[0].ssl_certfile, ssl_keyfile: cannot load {certs.client_cert}, {locked}:"
        )
