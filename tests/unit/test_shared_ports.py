"""Two instances whose servers would listen on one port of one host are refused when the
scenario is loaded, naming the port and the hosts: the hosts an instance serves on are its
kind's to say (Kind.serving), e.g. the ensemble's storage host besides its models."""

from __future__ import annotations

import pytest

from testbed.core.errors import ScenarioError
from testbed.scenario.resolve import load_scenario_data
from testbed.workloads import kinds

BASE = {"name": "p", "topology": {"hosts": 5, "link_rate": "100mbit"}}
EVERY = [f"h{i}" for i in range(1, 6)]


def load(**workloads):
    return load_scenario_data({**BASE, "workloads": workloads}, "p.yaml")


def on(kind, *hosts, **more):
    return {"kind": kind, "utilization": "5%", **({"hosts": list(hosts)} if hosts else {}), **more}


def test_one_port_on_one_host_twice_is_refused():
    with pytest.raises(ScenarioError, match=r"workloads.b.port: 6000 is also a's port on h2, h3"):
        load(a=on("websearch", "h1", "h2", "h3", port=6000), b=on("incast", "h2", "h3", port=6000))
    load(a=on("websearch", "h1", "h2", port=6000), b=on("incast", "h3", "h4", port=6000))


def test_the_ensembles_storage_host_serves_on_its_port():
    e = {"kind": "ensemble", "hosts": ["h1", "h2"], "storage": "h5", "port": 6000}
    with pytest.raises(ScenarioError, match=r"workloads.b.port: 6000 is also e's port on h5"):
        load(e=e, b=on("incast", "h4", "h5", port=6000))
    load(e=e, b=on("incast", "h3", "h4", port=6000))


def test_an_instance_serves_on_its_hosts_or_every_host():
    s = load(a=on("websearch", "h1", "h3"), b=on("incast"))
    assert kinds.get("websearch").serving(s.workloads["a"], EVERY) == {"h1", "h3"}
    assert kinds.get("incast").serving(s.workloads["b"], EVERY) == set(EVERY)
