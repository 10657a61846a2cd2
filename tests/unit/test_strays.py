"""What `testbed down` takes for a run's leftovers without a state file (runtime/netns.py
`strays`): every name testbed gives, of a run id no state file names; never a recorded run's
object, a live kernel probe's namespace, or a name that is not testbed's."""

from __future__ import annotations

import os

from testbed.network.runtime import netns


def test_strays_are_testbed_names_of_runs_without_a_state_file(tmp_path, monkeypatch):
    run_ns, sys_net, state = tmp_path / "netns", tmp_path / "net", tmp_path / "state"
    for d in (run_ns, sys_net, state):
        d.mkdir()
    monkeypatch.setattr(netns, "NETNS_DIR", run_ns)
    monkeypatch.setattr(netns, "SYS_NET", sys_net)
    monkeypatch.setattr(netns, "STATE_DIR", state)
    lost = ["tb-5e1f00-leaf1", "tb-5e1f00-leaf2", "tb-5e1f00-spine1", "tb-5e1f00-h1",
            "tb-5e1f00-probe"]  # fmt: skip
    recorded = ["tb-c0ffee-sw", "tb-c0ffee-h1"]
    dead = 2**22 + 1  # above the kernel's pid_max: no such process
    for name in [*lost, *recorded, "tb-probe-1", f"tb-probe-{dead}", "tb-5e1f00-x1", "other"]:
        (run_ns / name).touch()
    for name in ["tb5e1f00", "tb5e1f00m1", "tbc0ffee", "tbc0ffeem1", "eth0", "tb5e1f00x"]:
        (sys_net / name).touch()
    (state / "c0ffee.json").write_text("{")  # even unreadable, it names its run
    (state / "5e1f00.lock").touch()  # a lock left by the killed run is no record
    assert not os.path.exists(f"/proc/{dead}")
    found = netns.strays()
    assert set(found) == {"5e1f00", None}
    assert sorted(found["5e1f00"]) == sorted([*lost, "tb5e1f00", "tb5e1f00m1"])
    assert found[None] == [f"tb-probe-{dead}"]  # pid 1 lives: its probe is left alone
