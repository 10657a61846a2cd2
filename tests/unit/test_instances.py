"""Named workload instances: several of one kind, the kinds as a registry, and one line naming
the field for every bad instance, with nothing created."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from testbed.core.errors import ScenarioError
from testbed.scenario.resolve import load_scenario, load_scenario_data
from testbed.scenario.schema import json_schema
from testbed.workloads import kinds

BASE = {"name": "m", "topology": {"hosts": 4, "link_rate": "100mbit"}, "tc_profile": "thesis-2band"}


def load(workloads, **more):
    return load_scenario_data({**BASE, "workloads": workloads, **more}, "s.yaml")


def test_a_key_that_names_a_kind_is_an_instance_of_it():
    s = load(
        {"horovod": {"compute_time": "1s"}, "websearch": {"utilization": "5%"}, "linkcheck": {}}
    )
    assert [(n, w.kind) for n, w in s.workloads.items()] == [
        ("horovod", "horovod"), ("websearch", "websearch"), ("linkcheck", "linkcheck"),
    ]  # fmt: skip
    assert s.workloads.horovod.d.compute_time == 1.0 and s.workloads.linkcheck.port == 5201
    assert s.workloads.websearch.port == 5301 and s.workloads.nothing is None


def test_several_instances_of_one_kind_share_hosts_with_their_own_ports():
    s = load({
        "a": {"kind": "horovod", "hosts": ["h1", "h2", "h3"], "compute_time": "1s", "tc_class": "low"},
        "b": {"kind": "torch-ddp", "hosts": ["h2", "h3", "h4"], "compute_time": "2s"},
        "w1": {"kind": "websearch", "utilization": "5%"},
        "w2": {"kind": "websearch", "arrival_rate": 3, "dscp": "CS1", "start": "1s", "stop": "3s"},
    }, duration="10s")  # fmt: skip
    assert [w.kind for w in s.workloads.values()] == [
        "horovod",
        "torch-ddp",
        "websearch",
        "websearch",
    ]
    assert (
        s.workloads.a.d.tc_class == "low" and s.workloads.b.d.tc_class == "high"
    )  # profile default
    assert (s.workloads.w1.port, s.workloads.w2.port) == (5301, 5302)
    assert s.workloads.w2.d.tc_class == "low" and (s.workloads.w2.start, s.workloads.w2.stop) == (
        1,
        3,
    )
    assert s.workloads.b.backend == "torch-ddp"
    again = load_scenario_data(yaml.safe_load(yaml.safe_dump(s.model_dump(mode="json"))), "again")
    assert again.model_dump() == s.model_dump()  # a resolved scenario reloads to itself


@pytest.mark.parametrize(
    ("workloads", "more", "message"),
    [
        ({"web": {"kind": "nope"}}, {}, "workloads.web.kind: 'nope' is not a workload kind; kinds: "),
        ({"web": {"utilization": "5%"}}, {}, "workloads.web.kind: required: name the instance's kind"),
        ({"web": {"kind": "websearch", "utilization": "5%", "start": "40s"}}, {},
         "workloads.web.start: 40s is not before the end of the run (30s)"),
        ({"web": {"kind": "websearch", "utilization": "5%", "stop": "31s"}}, {},
         "workloads.web.stop: 31s is after the end of the run"),
        ({"web": {"kind": "websearch", "utilization": "5%", "start": "5s", "stop": "2s"}}, {},
         "workloads.web.stop: must come after start (5s)"),
        ({"web": {"kind": "websearch", "utilization": "5%", "hosts": ["h1", "h9"]}}, {},
         "workloads.web.hosts[1]: 'h9' is not a host; hosts are h1 … h4"),
        ({"web": {"kind": "websearch", "utilization": "5%", "colour": "red"}}, {},
         "workloads.web.colour: unknown field"),
        ({"links": {"kind": "websearch", "utilization": "5%"}}, {}, "workloads.links: 'links' is a reserved name"),
        ({"Web": {"kind": "websearch", "utilization": "5%"}}, {}, "workloads.Web: an instance name is a lowercase"),
        ({"job": {"kind": "torch-ddp", "backend": "horovod"}}, {}, "workloads.job.backend: kind torch-ddp runs"),
        ({"web": {"kind": "websearch", "utilization": "5%"}}, {"expect": ["other.censored == 0"]},
         "expect[0]: other.censored: the summary has no 'other'"),
    ],
)  # fmt: skip
def test_bad_instances_are_one_line_naming_the_field(workloads, more, message):
    with pytest.raises(ScenarioError) as e:
        load(workloads, **more)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_two_instances_of_one_name_are_refused_by_the_cli(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(
        "name: x\ntopology: {hosts: 2}\nworkloads:\n"
        "  web: {kind: websearch, utilization: 5%}\n  web: {kind: websearch, utilization: 6%}\n"
    )
    with pytest.raises(
        ScenarioError, match=r"'web' is given twice in one mapping \(lines 4 and 5\)"
    ):
        load_scenario(f)
    r = subprocess.run([sys.executable, "-m", "testbed.cli", "up", str(f), "--out", str(tmp_path / "r")],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2 and "given twice" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "r").exists()


def test_the_json_schema_offers_every_registered_kind():
    schema = json_schema()
    refs = [
        r["$ref"].rsplit("/", 1)[1]
        for r in schema["properties"]["workloads"]["additionalProperties"]["anyOf"]
    ]
    offered = {schema["$defs"][r]["properties"]["kind"]["default"] for r in refs}
    assert offered == set(kinds.names())


def test_an_instance_set_to_null_is_absent():
    """As before named instances (`websearch: null`), and how a sweep drops one tenant."""
    s = load({"web": {"kind": "websearch", "utilization": "5%"}, "websearch": None, "job": None})
    assert list(s.workloads) == ["web"]
