"""`verl-tui check` at a thousand hosts: the doctor's serial part (every check decided from the
probe's facts, after the last probe answered) asks the inventory for each host by name, once
per check. Pure Python: no hosts.
"""

from __future__ import annotations

from tui.cluster.doctor import arrange, evaluate
from tui.cluster.probe import HostFacts
from tui.config.hosts import load_inventory


def _inventory(tmp_path, n: int):
    lines = ["cluster: big", "ssh:", "  user: train", "hosts:"]
    for i in range(n):
        lines += [f"  - name: node{i:04d}", f"    address: 10.{i >> 8}.{i & 255}.1"]
    path = tmp_path / "hosts.yaml"
    path.write_text("\n".join(lines) + "\n")
    return load_inventory(path)


def test_hosts_are_found_by_name_in_the_inventory_and_in_a_copy_with_other_hosts(tmp_path):
    """Inventory.host answers from one dict (a walk per call was 5,000 walks of 1,024 hosts a
    check); a copy made with other hosts (model_copy keeps what the original cached) answers
    for its own hosts only."""
    inventory = _inventory(tmp_path, 1024)
    assert [inventory.host(h.name) for h in inventory.hosts] == list(inventory.hosts)
    for missing in ("node1024", "", "NODE0001"):
        try:
            inventory.host(missing)
        except KeyError as exc:
            assert exc.args == (missing,)
        else:
            raise AssertionError(f"{missing!r} found")
    kept = inventory.hosts[5:7]
    copy = inventory.model_copy(update={"hosts": kept})
    assert [copy.host(h.name) for h in kept] == list(kept)
    try:
        copy.host("node0001")
    except KeyError:
        pass
    else:
        raise AssertionError("a host the copy does not hold was found")
    assert inventory.host("node0001").name == "node0001"


def test_the_doctor_decides_a_thousand_hosts_from_their_facts(tmp_path):
    """1,024 hosts' facts (one without an answer) give the doctor's rows, folded: the host that
    did not answer is named, the others are counted."""
    inventory = _inventory(tmp_path, 1024)
    facts = {
        h.name: HostFacts(
            host=h.name,
            ok=True,
            reached=True,
            python_executable="/usr/bin/python3",
            python_version="3.11.7",
            packages={"ray": "2.49.0"},
            ray_version="2.49.0",
            cpu_count=64,
            gpu_count=8,
        )
        for h in inventory.hosts
    }
    facts["node0007"] = HostFacts(
        host="node0007", reached=True, error="interpreter not found: python3"
    )
    rows = arrange(evaluate(inventory, facts), [h.name for h in inventory.hosts])
    ray = [r for r in rows if r.check == "ray-installed"]
    assert [(r.status, r.host) for r in ray] == [("ok", None)]
    assert "(1023 hosts:" in ray[0].finding
    interpreter = [r for r in rows if r.check == "python-interpreter" and r.status == "fail"]
    assert [r.host for r in interpreter] == ["node0007"]


def test_a_command_runs_with_few_collections_and_leaves_the_collector_as_it_was():
    """Inside a command (`check` over 1,024 hosts, a `profile import` of a long script) the
    objects made before it are frozen out of the collector's passes and a pass comes every
    50,000 young objects; after it (or an error in it) the collector is as it was, for a caller
    that goes on in the same process."""
    import gc

    from tui.cli import BATCH_GC_THRESHOLD, few_collections

    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    for fails in (False, True):
        try:
            with few_collections():
                assert gc.get_threshold() == BATCH_GC_THRESHOLD
                assert gc.get_freeze_count() > 1000  # the modules, at least
                if fails:
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            assert fails
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_the_cli_runs_every_command_with_few_collections(tmp_path, capsys):
    """`verl-tui profile import` of a long script run through the CLI's main: the collector's
    passes during it come at the batch threshold, with the imported modules frozen; after it
    the process's own settings are back."""
    import gc

    from tui.cli import BATCH_GC_THRESHOLD, main

    script = tmp_path / "long.sh"
    notes = "".join(f"echo step {i} >> /tmp/log-{i}.txt\n" for i in range(3000))
    script.write_text(notes + "python3 -m verl.trainer.main_ppo trainer.total_epochs=1\n")
    before = gc.get_threshold()
    seen: list[tuple[tuple[int, int, int], int]] = []

    def record(phase: str, info: dict) -> None:
        if phase == "start":
            seen.append((gc.get_threshold(), gc.get_freeze_count()))

    gc.collect()
    gc.callbacks.append(record)
    try:
        code = main(["profile", "import", str(script), "-o", str(tmp_path / "long.yaml")])
    finally:
        gc.callbacks.remove(record)
    assert code == 0, capsys.readouterr()
    assert seen and all(t == BATCH_GC_THRESHOLD and frozen > 1000 for t, frozen in seen), seen
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
