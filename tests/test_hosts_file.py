"""hosts.yaml: good files resolve every default; bad files give one line naming file:line."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest
from harness.cli import run_cli

from tui.config.hosts import load_inventory, local_inventory
from tui.config.yamlfile import ConfigError

GOOD = """\
cluster: demo
python: /opt/verl/.venv/bin/python3
ssh:
  user: root
  port: 22
  identity_file: ~/.ssh/id_ed25519
  known_hosts: ~/.ssh/known_hosts
  jump: bastion
hosts:
  - name: node1
    address: 10.0.0.11
    role: head
    node_ip: 10.0.0.11
  - name: node2
    address: 10.0.0.12
    python: /usr/bin/python3
    ssh:
      port: 2222
  - name: node3
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_good_file_resolves_defaults_and_overrides(tmp_path):
    inv = load_inventory(write(tmp_path, GOOD))
    assert inv.cluster == "demo"
    assert [h.name for h in inv.hosts] == ["node1", "node2", "node3"]
    assert inv.head.name == "node1"
    n1, n2, n3 = inv.hosts
    assert (n1.address, n1.node_ip, n1.python) == (
        "10.0.0.11",
        "10.0.0.11",
        "/opt/verl/.venv/bin/python3",
    )
    assert n2.python == "/usr/bin/python3"
    assert n2.ssh.port == 2222 and n2.ssh.user == "root" and n2.ssh.jump == "bastion"
    assert n1.ssh.port == 22
    # address defaults to the name; node_ip to the address
    assert (n3.address, n3.node_ip, n3.role) == ("node3", "node3", "worker")
    assert inv.insecure_hosts == []


def test_head_defaults_to_first_host_and_insecure_is_listed(tmp_path):
    inv = load_inventory(
        write(
            tmp_path,
            """\
        hosts:
          - name: a
          - name: b
            ssh: {insecure_skip_host_key_check: true}
        """,
        )
    )
    assert inv.head.name == "a"
    assert inv.insecure_hosts == ["b"]


def test_builtin_inventory_is_localhost_over_local_transport():
    inv = local_inventory()
    (host,) = inv.hosts
    assert host.name == "localhost" and host.transport == "local" and host.is_head
    assert host.python == sys.executable


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("hosts:\n  - name: a\n    address: [1\n", 3, "invalid YAML"),
        (
            "hosts:\n  - name: a\n    adress: 10.0.0.1\n",
            3,
            "hosts[0].adress: unknown key (did you mean 'address'?)",
        ),
        (
            "ssh:\n  port: twenty-two\nhosts:\n  - name: a\n",
            2,
            "ssh.port: Input should be a valid integer",
        ),
        (
            "hosts:\n  - name: a\n    role: head\n  - name: b\n    role: head\n",
            5,
            "more than one host has role: head (a, b)",
        ),
        ("cluster: x\nhosts: []\n", 2, "hosts: no hosts listed"),
        ("cluster: x\n", 1, "hosts: required key is missing"),
        ("hosts:\n  - name: a\n  - name: b\n  - name: a\n", 4, "duplicate host name 'a'"),
        ("hosts:\n  - name: a\nhosts:\n  - name: b\n", 3, "duplicate key 'hosts'"),
        (
            "hosts:\n  - name: a\n    role: boss\n",
            3,
            "hosts[0].role: Input should be 'head' or 'worker'",
        ),
        ("hosts:\n  - name: 'a;rm -rf /'\n", 2, "hosts[0].name: host names use letters"),
        (
            "hosts:\n  - name: a\n    address: -oProxyCommand=touch\n",
            3,
            "is not a host name or IP address",
        ),
        ("- just\n- a list\n", 1, "expected a mapping"),
        ("hosts:\n  - name: a\n    ssh:\n      port: 70000\n", 4, "hosts[0].ssh.port"),
    ],
)
def test_bad_files_name_file_and_line(tmp_path, text, line, fragment):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_inventory(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert fragment in message
    assert "\n" not in message


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_inventory(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    "argv",
    [["gpus", "{bad}"], ["{bad}"], ["gpus", "--interval", "0", "{good}"], ["gpus", "--bogus"]],
)
def test_cli_bad_input_exits_2_with_one_line(tmp_path, argv):
    bad = write(tmp_path, "hosts:\n  - name: a\n    role: head\n  - name: b\n    role: head\n")
    good = tmp_path / "good.yaml"
    good.write_text("hosts:\n  - name: a\n")
    args = [a.format(bad=bad, good=good) for a in argv]
    proc = run_cli([*args], timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith("verl-tui")
    if "{bad}" in argv:
        assert f"{bad}:5:" in lines[0]


def test_example_file_in_the_repo_loads():
    inv = load_inventory(Path(__file__).parents[1] / "hosts.example.yaml")
    assert [h.name for h in inv.hosts] == ["node1", "node2", "login"]
    assert inv.host("node2").ssh.port == 2222 and inv.host("login").transport == "local"
    assert inv.telemetry.interval == 1.0


def _schema_keys(model: type, seen: set[type] | None = None) -> set[str]:
    """Every key a hosts.yaml model and the models inside it take (their fields' aliases)."""
    import typing

    from pydantic import BaseModel

    seen = set() if seen is None else seen
    seen.add(model)
    keys: set[str] = set()
    for name, info in model.model_fields.items():
        keys.add(info.alias or name)
        pending = [info.annotation]
        while pending:
            kind = pending.pop()
            pending.extend(typing.get_args(kind))
            if isinstance(kind, type) and issubclass(kind, BaseModel) and kind not in seen:
                keys |= _schema_keys(kind, seen)
    return keys


def test_every_hosts_yaml_key_is_in_the_example_file():
    """docs/hosts-yaml.md says every key, with its default, is in hosts.example.yaml (which
    the page embeds): a key added to the schema without its line there fails here."""
    from tui.config.hosts import HostsFileModel

    text = (Path(__file__).parents[1] / "hosts.example.yaml").read_text()
    keys = _schema_keys(HostsFileModel)
    assert {"keepalive_interval", "stall", "startup_s", "exec", "webhook"} <= keys  # it walks
    missing = sorted(
        k for k in keys if not re.search(rf"(^|[\s{{,])#?\s*{re.escape(k)}:", text, re.M)
    )
    assert not missing, f"hosts.example.yaml lacks {missing}"


def test_a_node_ip_ray_reports_names_its_host_and_a_loopback_host_takes_its_own_address():
    """Ray reports a node started with --node-ip-address=127.0.0.1 under the machine's primary
    address (seen on the device: 192.0.2.2): the local cockpit's one host must still own it,
    or `up` waits for a node it never recognises."""
    from tui.config.hosts import local_inventory, parse_inventory

    local = local_inventory()
    assert local.host_of_ip("192.0.2.2") == "localhost" == local.host_of_ip("127.0.0.1")
    assert local.host_of_ip(None) is None and local.host_of_ip("") is None
    inv = parse_inventory(
        "hosts:\n  - name: a\n    address: 10.0.0.1\n  - name: b\n    address: 10.0.0.2\n"
    )
    assert inv.host_of_ip("10.0.0.2") == "b" and inv.host_of_ip("10.0.0.9") is None
    two = parse_inventory(
        "hosts:\n  - name: a\n    transport: local\n  - name: b\n    transport: local\n"
        "    node_ip: 127.0.0.2\n"
    )
    assert two.host_of_ip("192.0.2.2") is None  # two loopback hosts: which one is not known
    # A copy with other hosts (archive followers, the head alone) answers for its own hosts,
    # though model_copy carries the original's cached map along.
    only_a = inv.model_copy(update={"hosts": (inv.host("a"),)})
    assert only_a.host_of_ip("10.0.0.2") is None and only_a.host_of_ip("10.0.0.1") == "a"
    assert inv.host_of_ip("10.0.0.2") == "b"
