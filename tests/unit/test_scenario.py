import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.errors import ScenarioError
from testbed.scenario import dump_scenario, json_schema, load_scenario, load_scenario_data

ROOT = Path(__file__).resolve().parents[2]
BASE = {"name": "t", "topology": {"hosts": 4}}


def bad(mutate) -> str:
    data = json.loads(json.dumps(BASE))
    mutate(data)
    with pytest.raises(ScenarioError) as e:
        load_scenario_data(data, "s.yaml")
    assert e.value.exit_code == 2
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_smoke_example_resolves():
    s = load_scenario(ROOT / "examples" / "smoke.yaml")
    assert s.topology.hosts == 4
    assert s.topology.link_rate == 100_000_000
    assert s.duration == 20
    assert s.tc_profile.name == "thesis-2band"
    assert [c.name for c in s.tc_profile.classes] == ["high", "low"]
    assert s.tc_profile.cls("high").dscp == [46]
    assert s.tc_profile.cls("low").dscp == [8]


def test_resolved_dump_reloads_identically():
    s = load_scenario(ROOT / "examples" / "smoke.yaml")
    text = dump_scenario(s)
    again = load_scenario_data(yaml.safe_load(text), "resolved")
    assert again == s
    assert "link_rate: 100mbit" in text and "duration: 20s" in text


def test_defaults():
    s = load_scenario_data(BASE, "s.yaml")
    assert s.runtime == "netns"
    assert s.tc_profile.name == "fifo"
    assert str(s.topology.prefix) == "10.10.0.0/24"
    assert s.workloads.linkcheck is None


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["topology"].update(hosts=-3), "s.yaml: topology.hosts: must be ≥ 2, got -3"),
        (lambda d: d["topology"].update(hosts="many"), "topology.hosts: must be a whole number"),
        (
            lambda d: d["topology"].update(link_rate="100mbps"),
            "topology.link_rate: '100mbps': 'bps' units",
        ),
        (
            lambda d: d["topology"].update(link_rate="fast"),
            "topology.link_rate: cannot read 'fast'",
        ),
        (
            lambda d: d["topology"].update(delay="2 parsecs"),
            "topology.delay: '2 parsecs': unknown time unit",
        ),
        (lambda d: d["topology"].update(hostz=3), "topology.hostz: unknown field"),
        (lambda d: d.update(runtime="vm"), "runtime: must be one of 'netns' or 'docker', got 'vm'"),
        (lambda d: d.update(duration="-1s"), "duration: must be > 0"),
        (lambda d: d.pop("topology"), "topology: required field is missing"),
        (
            lambda d: d.update(tc_profile="nope"),
            "tc_profile: no tc profile 'nope'; shipped profiles: fifo, thesis-2band",
        ),
        (lambda d: d["topology"].update(jitter="1ms"), "topology.jitter: needs a delay"),
        (
            lambda d: d["topology"].update(prefix="8.8.8.0/24"),
            "topology.prefix: 8.8.8.0/24 must be a private prefix",
        ),
        (
            lambda d: d["topology"].update(hosts=30, prefix="10.1.0.0/28"),
            "topology.prefix: 10.1.0.0/28 has room for 13 hosts",
        ),
        (
            lambda d: d["topology"].update(management_prefix="10.10.0.0/16"),
            "topology.management_prefix: prefix 10.10.0.0/24 and",
        ),
        (
            lambda d: d.update(workloads={"linkcheck": {"bulk_classes": ["high"]}}),
            "workloads.linkcheck.bulk_classes[0]: 'high' is not a class of tc profile 'fifo'",
        ),
        (
            lambda d: d.update(workloads={"linkcheck": {"pattern": "mesh"}}),
            "workloads.linkcheck.pattern: must be one of",
        ),
        (
            lambda d: d.update(tc_profile={"name": "p", "classes": [{"name": "a", "dscp": [99]}]}),
            "tc_profile.classes[0].dscp[0]: DSCP must be 0–63, got 99",
        ),
        (lambda d: d.update(name="has space"), "name: 'has space' is not allowed"),
    ],
)
def test_errors_name_the_field(mutate, expected):
    assert expected in bad(mutate)


def test_several_errors_still_one_line():
    msg = bad(lambda d: d.update(seed=-1, duration="x", topology={"hosts": 1}))
    assert "more problems" in msg


def test_profile_by_path_relative_to_scenario(tmp_path):
    (tmp_path / "mine.yaml").write_text(
        "name: mine\nclasses:\n  - {name: a, dscp: [EF]}\n  - {name: b, dscp: [AF41, 10]}\ndefault: a\n"
    )
    (tmp_path / "s.yaml").write_text("name: t\ntopology: {hosts: 2}\ntc_profile: mine.yaml\n")
    s = load_scenario(tmp_path / "s.yaml")
    assert s.tc_profile.cls("b").dscp == [34, 10]


def test_yaml_syntax_error_names_line(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: t\ntopology: {hosts: 2\n")
    with pytest.raises(ScenarioError, match=r"not valid YAML at line \d+"):
        load_scenario(p)


def test_json_schema_describes_fields():
    schema = json_schema()
    topo = schema["$defs"]["Topology"]["properties"]
    assert topo["hosts"]["minimum"] == 2
    assert any("bit" in alt.get("pattern", "") for alt in topo["link_rate"]["anyOf"])
    assert {"name", "topology", "tc_profile", "workloads"} <= set(schema["properties"])
    assert schema["required"] == ["name", "topology"]


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "testbed.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
    )


def test_cli_validate_prints_resolved():
    r = _cli("validate", "examples/smoke.yaml")
    assert r.returncode == 0, r.stderr
    assert yaml.safe_load(r.stdout)["tc_profile"]["classes"][1]["dscp"] == [8]


def test_cli_bad_input_exit_2_one_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: t\ntopology: {hosts: -3}\n")
    r = _cli("validate", str(p))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "topology.hosts: must be ≥ 2, got -3" in lines[0]


def test_cli_missing_file(tmp_path):
    r = _cli("validate", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2 and "no such scenario file" in r.stderr


def test_cli_schema_is_json():
    r = _cli("schema")
    assert r.returncode == 0
    assert json.loads(r.stdout)["title"] == "testbed scenario"
