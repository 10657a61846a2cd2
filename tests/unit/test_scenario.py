import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.core.errors import ScenarioError
from testbed.scenario.resolve import load_scenario, load_scenario_data
from testbed.scenario.schema import dump_scenario, json_schema

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
        (lambda d: d["topology"].update(mtu=65000), "topology.mtu: must be ≤ 9216, got 65000"),
        (lambda d: d["topology"].update(mtu=100), "topology.mtu: must be ≥ 576, got 100"),
        (
            lambda d: d["topology"].update(tcp_rcvbuf="1KB"),
            "topology.tcp_rcvbuf: must be ≥ 4096, got '1KB'",
        ),
        (lambda d: d["topology"].update(tcp=None), "topology.tcp: must be a string, got nothing"),
        (
            lambda d: d["topology"].update(tcp_segment="1460B"),
            "topology.tcp_segment: 1460 B of payload and 52 B of IP and TCP headers exceed the "
            "MTU (1500 B); at most 1448B, or raise mtu",
        ),
        (
            lambda d: d["topology"].update(tcp_sndbuf="1KB"),
            "topology.tcp_sndbuf: must be ≥ 4096, got '1KB'",
        ),
        (
            lambda d: d["topology"].update(tcp_recovery="newreno"),
            "topology.tcp_recovery: must be one of 'linux' or 'classic', got 'newreno'",
        ),
        (lambda d: d.update(runtime="vm"), "runtime: must be one of 'netns' or 'docker', got 'vm'"),
        (lambda d: d.update(duration="-1s"), "duration: must be > 0"),
        (lambda d: d.pop("topology"), "topology: required field is missing"),
        (
            lambda d: d.update(tc_profile="nope"),
            "tc_profile: no tc profile 'nope'; shipped profiles: fifo, tenants-4band, thesis-2band",
        ),
        (lambda d: d["topology"].update(jitter="1ms"), "topology.jitter: needs a delay"),
        (
            lambda d: d["topology"].update(prefix="8.8.8.0/24"),
            "topology.prefix: 8.8.8.0/24 must be a private prefix",
        ),
        (
            lambda d: d["topology"].update(hosts=30, prefix="10.1.0.0/28"),
            "topology.prefix: 10.1.0.0/28 has room for 14 hosts, not 30; use a larger prefix (at least /27)",
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
    assert re.search(_string_pattern(schema, "topology.link_rate"), "100mbit")
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


# YAML 1.1 booleans: PyYAML (what `testbed up` loads with) reads unquoted on/off/yes/no/true/false
# as booleans, so `prometheus: off` arrives as False.


def _scenario_file(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text("name: t\ntopology: {hosts: 2}\n" + text)
    return p


@pytest.mark.parametrize("word", ["off", "Off", "OFF", "no", "false"])
def test_prometheus_off_unquoted_means_off(tmp_path, word):
    s = load_scenario(_scenario_file(tmp_path, f"metrics:\n  prometheus: {word}\n"))
    assert s.metrics.prometheus == "off"


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("metrics: {prometheus: off}\n", "off"),
        ("metrics: {prometheus: 'off'}\n", "off"),
        ("metrics: {prometheus: embedded}\n", "embedded"),
        ("metrics: {prometheus: external, file_sd_dir: d}\n", "external"),
    ],
)
def test_prometheus_flow_style_and_quoted(tmp_path, text, mode):
    assert load_scenario(_scenario_file(tmp_path, text)).metrics.prometheus == mode


@pytest.mark.parametrize("word", ["on", "yes", "true"])
def test_prometheus_on_is_refused_with_the_choices(tmp_path, word):
    with pytest.raises(ScenarioError) as e:
        load_scenario(_scenario_file(tmp_path, f"metrics: {{prometheus: {word}}}\n"))
    msg = str(e.value)
    assert "\n" not in msg
    assert "metrics.prometheus: got true (YAML reads an unquoted on, yes or true" in msg
    assert "write embedded, external or off" in msg


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "runtime: no\n",
            "runtime: must be one of 'netns' or 'docker', got false (YAML reads an unquoted "
            "off, no or false as a boolean)",
        ),
        (
            "workloads: {linkcheck: {pattern: on}}\n",
            "workloads.linkcheck.pattern: must be one of 'ring', 'single', 'incast', 'outcast' or "
            "'across', "
            "got true (YAML reads",
        ),
        (
            "tc_profile: {name: p, classes: [{name: a, dscp: [EF]}, {name: off}], default: off}\n",
            "tc_profile.classes[1].name: must be a string, got false (YAML reads an unquoted off, "
            "no or false as a boolean); write the word in quotes: 'off', 'no' or 'false'",
        ),
    ],
)
def test_yaml_booleans_in_string_fields_are_explained(tmp_path, text, expected):
    with pytest.raises(ScenarioError) as e:
        load_scenario(_scenario_file(tmp_path, text))
    assert "\n" not in str(e.value)
    assert expected in str(e.value)


def test_quoted_off_is_a_class_name(tmp_path):
    s = load_scenario(
        _scenario_file(
            tmp_path,
            "tc_profile: {name: p, classes: [{name: a, dscp: [EF]}, {name: 'off'}], default: 'off'}\n",
        )
    )
    assert s.tc_profile.class_names == ["a", "off"]


# Units: the scenario reads every spelling the unit parser reads (any case), and the JSON Schema
# that `testbed schema` publishes accepts exactly those.

UNIT_CASES = [
    # (where, YAML value, attribute path, value by hand)
    ("topology.link_rate", "10Gbit", 10_000_000_000),
    ("topology.link_rate", "10gbit", 10_000_000_000),
    ("topology.link_rate", "10GBIT", 10_000_000_000),
    ("topology.link_rate", "1.5Mbit", 1_500_000),
    ("topology.link_rate", "100mbit/s", 100_000_000),
    ("topology.link_rate", "2.5 Gbit/s", 2_500_000_000),
    ("topology.link_rate", "64Kbit", 64_000),
    ("topology.link_rate", "1e9", 1_000_000_000),  # YAML 1.1 reads 1e9 as a string
    ("topology.link_rate", "'250000000'", 250_000_000),
    ("workloads.linkcheck.short_size", "64kb", 64_000),
    ("workloads.linkcheck.short_size", "64KB", 64_000),
    ("workloads.linkcheck.short_size", "64Kb", 64_000),
    ("workloads.linkcheck.short_size", "2kib", 2_048),
    ("workloads.linkcheck.short_size", "1.5MB", 1_500_000),
    ("workloads.linkcheck.short_size", "1500b", 1_500),
    ("workloads.linkcheck.short_size", "'1500'", 1_500),
    ("workloads.horovod.fusion_threshold", "6.28mb", 6_280_000),
    ("workloads.horovod.fusion_threshold", "1MiB", 1_048_576),
    ("topology.delay", "2MS", 0.002),
    ("topology.delay", "10US", 0.000_01),
    ("topology.delay", "10µs", 0.000_01),
    ("topology.loss", "0.5 %", 0.5),
    ("duration", "2M", 120.0),
    ("duration", "1Min", 60.0),
]


def _with(where: str, value: str) -> str:
    """A scenario file with one field set, as YAML text."""
    parts = where.split(".")
    body = value
    for key in reversed(parts):
        body = f"{{{key}: {body}}}"
    data = yaml.safe_load(body)
    base = {"name": "t", "topology": {"hosts": 2, "delay": "20ms"}, "duration": "10m"}
    for key, sub in data.items():
        base[key] = {**base.get(key, {}), **sub} if isinstance(sub, dict) else sub
    return yaml.safe_dump(base)


def _get(s, where: str):
    for key in where.split("."):
        s = getattr(s, key)
    return s


@pytest.mark.parametrize(("where", "value", "expected"), UNIT_CASES)
def test_unit_spellings_through_a_scenario_file(tmp_path, where, value, expected):
    p = tmp_path / "s.yaml"
    p.write_text(_with(where, value))
    assert _get(load_scenario(p), where) == pytest.approx(expected, rel=1e-12)


def _string_pattern(schema: dict, where: str) -> str:
    defs = schema["$defs"]
    node = schema
    for key in where.split("."):
        if "properties" not in node and "additionalProperties" in node:
            # workloads: an instance named as its kind is one of the kinds' configurations
            refs = [r["$ref"].rsplit("/", 1)[1] for r in node["additionalProperties"]["anyOf"]]
            node = next(
                defs[r] for r in refs if defs[r]["properties"]["kind"].get("default") == key
            )
            continue
        prop = node["properties"][key]
        if "$ref" in prop or ("anyOf" in prop and "$ref" in prop["anyOf"][0]):
            ref = prop.get("$ref") or prop["anyOf"][0]["$ref"]
            node = defs[ref.rsplit("/", 1)[1]]
        else:
            node = prop
    return next(alt["pattern"] for alt in node["anyOf"] if alt.get("type") == "string")


@pytest.mark.parametrize(("where", "value", "expected"), UNIT_CASES)
def test_json_schema_accepts_what_the_parser_reads(where, value, expected):
    pattern = _string_pattern(json_schema(), where)
    text = yaml.safe_load(value)
    if isinstance(text, str):
        assert re.search(pattern, text), (where, text, pattern)


@pytest.mark.parametrize(
    ("where", "value", "expected"),
    [
        ("topology.link_rate", "10 parsecs", "'10 parsecs': unknown rate unit 'parsecs'; write e.g. 100mbit"),
        ("topology.link_rate", "10mbps", "'10mbps': 'bps' units are ambiguous"),
        ("topology.link_rate", "10ps", "'10ps': unknown rate unit 'ps'"),
        ("topology.link_rate", "-5mbit", "'-5mbit': a rate cannot be negative"),
        ("topology.link_rate", "fast", "cannot read 'fast' as a rate (e.g. 100mbit, 10Gbit)"),
        ("workloads.linkcheck.short_size", "10 parsecs", "'10 parsecs': unknown size unit 'parsecs'; write e.g. 1500B"),
        ("topology.delay", "10 parsecs", "'10 parsecs': unknown time unit 'parsecs'; write e.g. 10us"),
    ],
)  # fmt: skip
def test_unit_garbage_is_refused_naming_the_field(tmp_path, where, value, expected):
    p = tmp_path / "s.yaml"
    p.write_text(_with(where, value))
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert "\n" not in str(e.value)
    assert f"s.yaml: {where}: {expected}" in str(e.value)
    assert not re.search(_string_pattern(json_schema(), where), value)


def test_file_sd_dir_is_relative_to_the_scenario_and_kept_absolute(tmp_path, monkeypatch):
    """The guardian and `testbed down` remove the run's file_sd entry from other working
    folders: the resolved scenario names the folder absolutely, from the scenario's folder."""
    (tmp_path / "sc").mkdir()
    (tmp_path / "sd").mkdir()
    f = tmp_path / "sc" / "s.yaml"
    f.write_text(
        "name: x\ntopology: {hosts: 2}\nmetrics: {prometheus: external, file_sd_dir: ../sd}\n"
    )
    monkeypatch.chdir("/")  # not the scenario's folder
    assert load_scenario(f).metrics.file_sd_dir == str(tmp_path / "sd")


def test_the_kernel_probe_is_kept_until_the_kernel_can_have_changed(tmp_path, monkeypatch):
    """A cached answer serves while the boot and the loaded modules are the same; a module
    loaded since (say sch_netem) makes testbed probe again."""
    from testbed.network import preflight
    from testbed.network.runtime.kernel_probe import Capabilities

    monkeypatch.setattr(preflight, "KERNEL_CACHE", tmp_path / "cache")
    probes: list[int] = []
    from testbed.network.runtime.kernel_probe import REQUIRED

    full = frozenset(REQUIRED)

    def fake_probe(name=None):
        probes.append(1)
        return Capabilities(full | ({"netem"} if len(probes) > 1 else set()))

    monkeypatch.setattr(preflight, "probe", fake_probe)
    monkeypatch.setattr(preflight, "_kernel_identity", lambda: "boot-1 htb")
    assert not preflight.kernel_capabilities().has("netem")
    assert not preflight.kernel_capabilities().has("netem") and len(probes) == 1
    monkeypatch.setattr(preflight, "_kernel_identity", lambda: "boot-1 htb sch_netem")
    assert preflight.kernel_capabilities().has("netem") and len(probes) == 2
    # an answer cached by a testbed that probed less is asked again
    cached = json.loads((tmp_path / "cache").read_text())
    (tmp_path / "cache").write_text(json.dumps({**cached, "probed": ["htb"]}))
    preflight.kernel_capabilities()
    assert len(probes) == 3


def test_a_kernel_without_receive_steering_is_named_in_one_warning():
    """Only the missing optional feature warns: the run still builds (each flow may then
    reach its receiver out of order, which the summary counts)."""
    from testbed.network import preflight
    from testbed.network.runtime.kernel_probe import REQUIRED, Capabilities

    assert preflight.kernel_warnings(Capabilities(frozenset({*REQUIRED, "rps"})), 10_000) == []
    (line,) = preflight.kernel_warnings(Capabilities(frozenset(REQUIRED)), 10_000)
    assert "net.core.rps_default_mask" in line and "Linux >= 6.2" in line
    assert "tcp.reorders_detected" in line and "\n" not in line
    # the receive backlog, a kernel setting, is named beside them when short
    (line,) = preflight.kernel_warnings(Capabilities(frozenset({*REQUIRED, "rps"})), 1000)
    assert "netdev_max_backlog is 1000" in line


def test_a_kernel_without_cls_bpf_refuses_only_the_fields_that_need_it():
    """exact-gso's uplink feed and a shared limit are BPF programs: without cls_bpf, one line
    naming the field and the way out; exact links with per-band limits need none."""
    from testbed.core.errors import EnvironmentProblem
    from testbed.network import preflight
    from testbed.network.runtime.kernel_probe import REQUIRED, Capabilities

    bare = Capabilities(frozenset(REQUIRED))

    def scenario(**topology: str) -> object:
        data = {"name": "s", "topology": {"hosts": 2, **topology}, "tc_profile": "thesis-ns3"}
        return load_scenario_data(data, "s.yaml")

    preflight.require_bpf(scenario(), Capabilities(frozenset({*REQUIRED, "cls_bpf"})))
    with pytest.raises(EnvironmentProblem) as e:
        preflight.require_bpf(scenario(link_mode="exact-gso"), bare)
    msg = str(e.value)
    assert msg.startswith("topology.link_mode: exact-gso and tc_profile.shared_limit need BPF")
    assert "modprobe cls_bpf" in msg and "\n" not in msg
    plain = load_scenario_data({"name": "s", "topology": {"hosts": 2}}, "s.yaml")
    preflight.require_bpf(plain, bare)  # nothing to refuse


@pytest.mark.parametrize(
    ("cpus", "mask"),
    [(1, "1"), (2, "3"), (16, "ffff"), (32, "ffffffff"), (33, "1,ffffffff"),
     (96, "ffffffff,ffffffff,ffffffff")],
)  # fmt: skip
def test_the_steering_mask_names_every_cpu_in_the_kernels_bitmap_format(cpus, mask):
    """Hex with a comma every 32 CPUs (lib/bitmap.c's bitmap_parse), counted by hand."""
    from testbed.network.runtime.network import rps_mask

    assert rps_mask(cpus) == mask


@pytest.mark.parametrize(
    ("topology", "message"),
    [
        ({"link_mode": "fast"}, "tc_profile.shared_limit: counts packets, and with"),
        ({"queue_limit": 100}, "topology.queue_limit: sets every class's own limit"),
        ({"link_mode": "exact-gso"}, "tc_profile.shared_limit: with topology.link_mode: "
                                     "exact-gso a host's own port cannot share"),
    ],
)  # fmt: skip
def test_a_shared_limit_with_what_it_cannot_count_is_one_line(topology, message):
    data = {"name": "s", "topology": {"hosts": 2, **topology},
            "tc_profile": "thesis-3band-shared"}  # fmt: skip
    with pytest.raises(ScenarioError) as e:
        load_scenario_data(data, "s.yaml")
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_exact_gso_takes_a_shared_limit_that_spares_the_hosts_ports():
    """thesis-ns3 gives hosts' ports a limit of their own (host_limit): only switch ports
    share, and those exact-gso counts as exact does."""
    data = {"name": "s", "topology": {"hosts": 2, "link_mode": "exact-gso"},
            "tc_profile": "thesis-ns3"}  # fmt: skip
    assert load_scenario_data(data, "s.yaml").topology.link_mode == "exact-gso"


def test_a_hosts_port_limit_with_every_class_limit_is_one_line():
    profile = {"name": "p", "classes": [{"name": "a"}], "host_limit": 100}
    data = {"name": "s", "topology": {"hosts": 2, "queue_limit": 100}, "tc_profile": profile}
    with pytest.raises(ScenarioError) as e:
        load_scenario_data(data, "s.yaml")
    msg = str(e.value)
    assert "topology.queue_limit: sets every class's own limit" in msg and "host_limit" in msg
    assert "\n" not in msg, msg


def test_a_shared_limit_profile_survives_the_round_trip_a_dilated_run_takes():
    """A dilated run's scenario is the dumped one loaded again (resolve.wall_scenario), and
    the dump gives every class its limit: the default, which a shared limit keeps."""
    from testbed.scenario.resolve import wall_scenario

    s = load_scenario(Path(__file__).resolve().parents[2] / "examples" / "thesis-exact.yaml")
    assert wall_scenario(s).tc_profile.shared_limit == 1000


def test_an_override_names_a_list_item_by_its_name_or_its_index():
    """A class's floor (its guaranteed share) is a knob a sweep sets like any other."""
    from testbed.scenario.resolve import with_overrides

    s = load_scenario_data(
        {"name": "x", "topology": {"hosts": 2}, "tc_profile": "thesis-2band",
         "workloads": {"linkcheck": {}}}, "s.yaml",
    )  # fmt: skip
    t = with_overrides(s, {"tc_profile.classes.low.guaranteed": 0.25})
    assert (t.tc_profile.cls("low").guaranteed, t.tc_profile.cls("high").guaranteed) == (0.25, 0.01)
    assert with_overrides(s, {"tc_profile.classes.0.limit": 50}).tc_profile.cls("high").limit == 50
    with pytest.raises(ScenarioError, match=r"classes has no item 'middle' \(it has high, low\)"):
        with_overrides(s, {"tc_profile.classes.middle.guaranteed": 0.2})
    with pytest.raises(ScenarioError, match=r"tc_profile\.classes is a list: name an item's field"):
        with_overrides(s, {"tc_profile.classes.low": 0.2})
    # the profile still validates: floors adding up to more than the link are refused
    with pytest.raises(ScenarioError, match="guaranteed shares add up to more than 1"):
        with_overrides(s, {"tc_profile.classes.low.guaranteed": 0.995})
