"""Config: every problem at once, with its path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from syncer.config import Config, HolePolicy
from syncer.errors import ConfigError

GOOD = """
local:   {bootstrap_servers: "127.0.0.1:9092"}
remotes:
  - {name: east, bootstrap_servers: "127.0.0.1:9192"}
topics:
  include: ["orders\\\\..*"]
  exclude: ["_.*"]
"""


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        Config.from_yaml(text)
    return caught.value.problems


def test_the_contract_example_loads() -> None:
    config = Config.from_yaml(GOOD)
    assert config.remote("east").bootstrap_servers == "127.0.0.1:9192"
    assert config.topics.selects("orders.eu")
    assert not config.topics.selects("payments") and not config.topics.selects("__consumer_offsets")


def test_every_problem_is_reported_at_once_with_its_path() -> None:
    found = problems("""
local: {bootstrap_servers: 1}
remotes:
  - {name: east}
  - {name: west, bootstrap_servers: "b:1", colour: blue}
topics: {include: "x"}
copier: {max_in_flight: many}
surprise: true
""")
    assert found == [
        "surprise: unknown key",
        "local.bootstrap_servers: expected str, got an integer",
        "remotes[0].bootstrap_servers: required",
        "remotes[1].colour: unknown key",
        "topics.include: expected a list, got a string",
        "copier.max_in_flight: expected int, got a string",
    ]


def test_cross_field_rules() -> None:
    found = problems("""
local: {bootstrap_servers: "localhost:9092"}
remotes:
  - {name: east, bootstrap_servers: "127.0.0.1:9092"}
  - {name: east, bootstrap_servers: "h:2"}
  - {bootstrap_servers: "h:3"}
topics: {include: ["("]}
""")
    assert "remotes[0].bootstrap_servers: is the local cluster" in found
    assert "remotes[1].name: duplicate remote name 'east'" in found
    assert "remotes[2].name: required" in found
    assert any(p.startswith("topics.include[0]: invalid regex") for p in found)


def test_empty_topic_selection_is_an_error() -> None:
    found = problems(GOOD.replace('include: ["orders\\\\..*"]', "include: []"))
    assert found == ["topics.include: at least one pattern is required"]


def test_environment_interpolation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EAST", "10.0.0.1:9092")
    monkeypatch.setenv("WAIT", "250")
    text = (
        GOOD.replace('"127.0.0.1:9192"', '"${EAST}"') + "copier: {fetch_max_wait_ms: '${WAIT}'}\n"
    )
    config = Config.from_yaml(text.replace("_.*", "${NOT_SET:-_.*}"))
    assert config.remote("east").bootstrap_servers == "10.0.0.1:9092"
    assert config.copier.fetch_max_wait_ms == 250
    assert config.topics.exclude == ("_.*",)
    assert problems(GOOD.replace('"127.0.0.1:9192"', '"${NOT_SET}"')) == [
        "remotes[0].bootstrap_servers: environment variable NOT_SET is not set"
    ]


def test_malformed_yaml_names_the_line() -> None:
    (problem,) = problems("local: {a: [1\n")
    assert problem.startswith("malformed YAML: line 2")


def test_coordination_settings_are_checked_together() -> None:
    found = problems(GOOD + "coordination: {instance_id: a, heartbeat_interval_ms: 20000}\n")
    assert found == [
        "coordination.instance_id: needs coordination.group",
        "coordination.heartbeat_interval_ms: must be below session_timeout_ms",
        "coordination.lease_ms: must lie between heartbeat_interval_ms and session_timeout_ms",
    ]
    config = Config.from_yaml(GOOD + "coordination: {group: mirrors}\n")
    assert config.coordination.enabled and config.coordination.lease_ms == 6000


@pytest.mark.parametrize("example", sorted(Path(__file__).parents[2].glob("examples/*.yaml")))
def test_the_examples_load(example: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EAST_BOOTSTRAP", "east-1:9092")
    config = Config.from_file(example)
    assert config.remotes and config.topics.include


def test_lanes_and_socket_buffers_are_checked() -> None:
    text = """
local:   {bootstrap_servers: "127.0.0.1:9092", connections: 2}
remotes:
  - {name: east, bootstrap_servers: "127.0.0.1:9192", connections: 0,
     socket_receive_buffer_bytes: 0, fetch_max_bytes: -5}
topics: {include: [x]}
http: {listen: "localhost"}
"""
    assert problems(text) == [
        "remotes[0].connections: must be 1..64",
        "remotes[0].socket_receive_buffer_bytes: must be positive, or -1 for the OS default",
        "remotes[0].fetch_max_bytes: must be positive (at most 2147483647), or 0 for the copier's",
        "local.connections: lanes are for remotes; the local cluster uses 1",
        "http.listen: expected host:port (or \"\" for off), got 'localhost'",
    ]
    config = Config.from_yaml(
        GOOD.replace('9192"}', '9192", connections: 16, socket_receive_buffer_bytes: 4194304}')
        + "http: {listen: ''}\n"
    )
    assert config.remote("east").connections == 16
    assert config.remote("east").socket_receive_buffer_bytes == 4194304
    assert config.http.address is None


def test_deployment_examples_use_only_metrics_syncer_serves() -> None:
    import json
    import re

    from syncer import metrics

    root = Path(__file__).parents[2] / "examples" / "deploy"
    source = Path(metrics.__file__).read_text()
    served = set(re.findall(r'"(syncer_[a-z_]+)"', source))
    served |= {f"{name}_total" for name in served}  # counters gain _total on the wire
    alerts = yaml.safe_load((root / "prometheus-alerts.yaml").read_text())
    used = set()
    for rule in alerts["groups"][0]["rules"]:
        used |= set(re.findall(r"syncer_[a-z_]+", rule["expr"]))
    dashboard = json.loads((root / "grafana-dashboard.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            used |= set(re.findall(r"syncer_[a-z_]+", target["expr"]))
    assert used and used <= served, used - served
    manifests = list(yaml.safe_load_all((root / "kubernetes.yaml").read_text()))
    config = Config.from_yaml(
        manifests[0]["data"]["syncer.yaml"].replace("${EAST_BOOTSTRAP}", "e:1")
    )
    assert config.coordination.enabled and config.http.address == ("0.0.0.0", 9644)


def test_on_hole_is_halt_or_fill() -> None:
    assert not Config.from_yaml(GOOD).topics.fills("orders.eu")
    assert Config.from_yaml(GOOD + "  on_hole: fill\n").topics.on_hole is HolePolicy.FILL
    assert Config.from_yaml(GOOD + "  on_hole: fill\n").topics.fills("orders.eu")
    assert not Config.from_yaml(GOOD + "  on_hole: halt\n").topics.fills("orders.eu")
    assert problems(GOOD + "  on_hole: skip\n") == [
        "topics.on_hole: must be 'halt' or 'fill', got 'skip'"
    ]
    assert problems(GOOD + "  on_hole: 3\n") == ["topics.on_hole: expected str, got an integer"]


def test_client_rack_is_a_remotes_rack_name_when_given() -> None:
    config = Config.from_yaml(GOOD.replace('9192"}', '9192", client_rack: use1-az2}'))
    assert config.remote("east").client_rack == "use1-az2"
    assert Config.from_yaml(GOOD).remote("east").client_rack is None  # leaders, as before
    found = problems("""
local: {bootstrap_servers: "127.0.0.1:9092", client_rack: r0}
remotes:
  - {name: east, bootstrap_servers: "127.0.0.1:9192", client_rack: "  "}
  - {name: west, bootstrap_servers: "127.0.0.1:9292", client_rack: 2}
topics: {include: [x]}
""")
    assert found == [
        "remotes[0].client_rack: a rack name, or leave it out to read from leaders",
        "remotes[1].client_rack: a rack name, or leave it out to read from leaders",
        "local.client_rack: only remotes are read from nearby replicas",
    ]


def test_problems_of_every_kind_are_reported_together() -> None:
    """An unknown key no longer hides the rules that span fields, nor a wrong value the
    others; an empty value where one is required is named with its path."""
    found = problems("""
local: {bootstrap_servers: "127.0.0.1:9092"}
remotes:
  - {name: east, bootstrap_servers: "h:1", colour: blue}
  - {name: east, bootstrap_servers: ""}
topics: {include: ["("]}
copier: {buffer_bytes: -1, max_chunks: lots}
""")
    assert found == [
        "remotes[0].colour: unknown key",
        "remotes[1].bootstrap_servers: required, got an empty value",
        "copier.max_chunks: expected int, got a string",
        "remotes[1].name: duplicate remote name 'east'",
        "topics.include[0]: invalid regex '(': missing ), unterminated subpattern at position 0",
        "copier.buffer_bytes: must be positive",
    ]


def test_a_wrong_value_is_said_once_not_again_by_the_rules_after() -> None:
    """A wrong value is left out (its default stands in), so a rule that would also trip on
    the default is not repeated at the same path; a missing section still lets the others be
    checked."""
    found = problems("""
remotes: {east: "h:1"}
topics: {include: ["("]}
""")
    assert found == [
        "local: required",
        "remotes: expected a list, got a mapping",
        "topics.include[0]: invalid regex '(': missing ), unterminated subpattern at position 0",
    ]


def test_a_blank_required_value_is_an_error() -> None:
    assert problems(GOOD.replace('"127.0.0.1:9092"', '"  "')) == [
        "local.bootstrap_servers: required, got an empty value"
    ]


_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 70_000), st.sampled_from(["", " ", "h:1", "(", "x"])
)
_KEYS = {
    "local": ["bootstrap_servers", "connections", "client_rack", "security_protocol", "name"],
    "remotes": ["name", "bootstrap_servers", "connections", "fetch_max_bytes", "ssl_cafile"],
    "topics": ["include", "exclude", "on_hole", "fill", "refresh_interval_s"],
    "copier": ["buffer_bytes", "max_chunks", "max_in_flight", "chunk_timeout_ms", "coalesce_bytes"],
    "coordination": ["group", "lease_ms", "instance_id"],
    "http": ["listen"],
    "groups": ["include", "interval_s"],
}


def _section(keys: list[str]) -> st.SearchStrategy[object]:
    values = st.one_of(_SCALARS, st.lists(_SCALARS, max_size=3))
    return st.one_of(_SCALARS, st.dictionaries(st.sampled_from([*keys, "oops"]), values))


_FILES = st.fixed_dictionaries(
    {},
    optional={
        name: st.lists(_section(keys), max_size=3) if name == "remotes" else _section(keys)
        for name, keys in _KEYS.items()
    },
)


@settings(max_examples=300, deadline=None)
@given(_FILES)
def test_any_file_is_loaded_or_refused_with_its_problems_never_a_crash(raw: object) -> None:
    """Whatever mix of wrong, missing and unknown values a file holds, loading it ends in a
    Config or a ConfigError listing problems with their paths, each path said once."""
    try:
        Config.from_dict(raw)
    except ConfigError as error:
        assert error.problems
        paths = [p.partition(": ")[0] for p in error.problems]
        assert len(paths) == len(set(paths))


@pytest.mark.parametrize("value", [-1, 1024 * 1024 + 1])
def test_coalesce_bytes_outside_0_to_1_mib_is_one_line(value: int) -> None:
    assert problems(GOOD + f"copier: {{coalesce_bytes: {value}}}\n") == [
        "copier.coalesce_bytes: must be 0 (off) up to 1048576 (a broker's default"
        " max.message.bytes is about 1 MiB)"
    ]


def test_coalesce_bytes_0_turns_coalescing_off_and_loads() -> None:
    assert Config.from_yaml(GOOD + "copier: {coalesce_bytes: 0}\n").copier.coalesce_bytes == 0


def test_a_key_given_twice_is_refused_naming_its_line() -> None:
    """PyYAML keeps the last of two equal keys: a second ``topics:`` block would replace the
    first without a word."""
    text = GOOD + "topics:\n  include: [payments]\n"
    assert problems(text) == ["malformed YAML: line 8, column 1: key 'topics' given twice"]


def test_a_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "syncer.yaml"
    path.write_bytes(GOOD.encode("utf-16"))
    with pytest.raises(ConfigError) as caught:
        Config.from_file(path)
    assert caught.value.problems == ["not UTF-8 text: byte 0xff at position 0"]
    secret = tmp_path / "password"
    secret.write_bytes(b"\xffsecret\n")
    text = GOOD.replace(
        '{bootstrap_servers: "127.0.0.1:9092"}',
        "{bootstrap_servers: '127.0.0.1:9092', security_protocol: SASL_PLAINTEXT,"
        f" sasl_mechanism: PLAIN, sasl_username: u, sasl_password_file: '{secret}'}}",
    )
    assert problems(text)[0] == (
        f"local.sasl_password_file: {secret} is not UTF-8 text: byte 0xff at position 0"
    )


@pytest.mark.parametrize(
    ("servers", "said"),
    [
        ("127.0.0.1:abc", "port must be a number 1..65535, got '127.0.0.1:abc'"),
        ("127.0.0.1:0", "port must be a number 1..65535, got '127.0.0.1:0'"),
        ("127.0.0.1:1 127.0.0.1:3", "expected host:port[,host:port...], got"),
        (",,,", "expected host:port[,host:port...], got ',,,'"),
        ("broker-1:", "expected host:port[,host:port...], got 'broker-1:'"),
    ],
)
def test_bootstrap_servers_must_be_host_port_lists(servers: str, said: str) -> None:
    text = GOOD.replace("127.0.0.1:9192", servers)
    (problem,) = problems(text)
    assert problem.startswith(f"remotes[0].bootstrap_servers: {said}")


def test_bootstrap_servers_of_names_and_ipv6_load() -> None:
    text = GOOD.replace("127.0.0.1:9192", "b-1.east:9092, b-2.east:9092,[::1]:9093")
    assert Config.from_yaml(text).remote("east").bootstrap_servers.endswith("[::1]:9093")
    text = GOOD.replace("127.0.0.1:9192", "broker-1")  # no port: 9092, as aiokafka takes it
    assert Config.from_yaml(text).remote("east").bootstrap_servers == "broker-1"


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        (
            "topics: {include: [x], refresh_interval_s: 0}",
            "topics.refresh_interval_s: must be positive",
        ),
        (
            "topics: {include: [x], refresh_interval_s: .nan}",
            "topics.refresh_interval_s: expected a finite number, got nan",
        ),
        (
            "topics: {include: [x], replication_factor: -2}",
            "topics.replication_factor: must be 1..32767, or -1 (or 0) for the cluster's",
        ),
        ("copier: {retry_backoff_ms: 0}", "copier.retry_backoff_ms: must be positive"),
        (
            "copier: {retry_backoff_ms: 500, retry_backoff_max_ms: 100}",
            "copier.retry_backoff_max_ms: must be at least retry_backoff_ms",
        ),
        (
            "copier: {fetch_max_bytes: 3000000000}",
            "copier.fetch_max_bytes: must be positive (at most 2147483647)",
        ),
        ("copier: {shutdown_timeout_s: -1}", "copier.shutdown_timeout_s: must be 0 or more"),
        ("groups: {interval_s: .inf}", "groups.interval_s: expected a finite number, got inf"),
        (
            "local: {bootstrap_servers: '127.0.0.1:9092', request_timeout_ms: 0}",
            "local.request_timeout_ms: must be positive (at most 2147483647)",
        ),
        (
            "local: {bootstrap_servers: '127.0.0.1:9092', metadata_max_age_ms: -1}",
            "local.metadata_max_age_ms: must be positive (at most 2147483647)",
        ),
        ("state_topic: 'a b/c'", "state_topic: not a Kafka topic name"),
        ("state_topic: ''", "state_topic: not a Kafka topic name"),
        ("name: ' '", "name: required, got an empty value"),
    ],
)
def test_numbers_and_names_out_of_their_range_are_one_line_each(setting: str, said: str) -> None:
    key = setting.partition(":")[0]
    base = "\n".join(line for line in GOOD.splitlines() if not line.startswith(key))
    if key == "topics":
        base = base.replace('  include: ["orders\\\\..*"]\n  exclude: ["_.*"]', "")
        base = base.replace("topics:\n", "")
    (problem,) = problems(f"{base}\n{setting}\n")
    assert problem.startswith(said)


def test_numbers_and_negatives_may_come_through_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REFRESH", "12.5")
    text = GOOD + "copier: {max_bytes_per_second: '${CAP:-0}'}\n"
    text = text.replace("topics:\n", "topics:\n  refresh_interval_s: '${REFRESH}'\n")
    text += "name: '${NAME:-mirror}'\nhttp: {listen: ''}\n"
    text = text.replace(
        '127.0.0.1:9092"}', "127.0.0.1:9092\", socket_send_buffer_bytes: '${SND:--1}'}"
    )
    config = Config.from_yaml(text)
    assert config.topics.refresh_interval_s == 12.5
    assert config.local.socket_send_buffer_bytes == -1 and config.name == "mirror"


def test_a_literal_dollar_brace_is_written_doubled() -> None:
    text = GOOD.replace(
        '{bootstrap_servers: "127.0.0.1:9092"}',
        "{bootstrap_servers: '127.0.0.1:9092', security_protocol: SASL_PLAINTEXT,"
        " sasl_mechanism: PLAIN, sasl_username: u, sasl_password: 'p$${x}w'}",
    )
    assert Config.from_yaml(text).local.sasl_password == "p${x}w"


def test_the_state_topic_is_never_mirrored() -> None:
    """A remote that is another deployment's local cluster holds a state topic of the same
    name; ``.*`` selects it, but it is syncer's own, not data."""
    everything = GOOD.replace('["orders\\\\..*"]', '[".*"]').replace('["_.*"]', "[]")
    config = Config.from_yaml(everything)
    assert config.topics.selects("_syncer_state") and not config.mirrors("_syncer_state")
    assert config.mirrors("orders.eu")
    other = Config.from_yaml(everything + "state_topic: mirror.state\n")
    assert other.topics.selects("mirror.state") and not other.mirrors("mirror.state")
    assert other.mirrors("_syncer_state")  # another deployment's name: data here


def test_yaml_merge_keys_load_and_may_be_given_again() -> None:
    """``<<: *anchor`` shares settings between remotes; a key given beside it overrides the
    merged one (not a key given twice)."""
    text = """
local: {bootstrap_servers: "127.0.0.1:9092"}
remotes:
  - &east {name: east, bootstrap_servers: "127.0.0.1:9192", request_timeout_ms: 5000}
  - <<: *east
    name: west
    bootstrap_servers: "127.0.0.1:9292"
topics: {include: [x]}
"""
    config = Config.from_yaml(text)
    assert [r.name for r in config.remotes] == ["east", "west"]
    assert config.remote("west").request_timeout_ms == 5000
    assert config.remote("west").bootstrap_servers == "127.0.0.1:9292"
