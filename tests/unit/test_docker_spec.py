"""The container a host becomes: what Docker is asked for, computed without an engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.errors import ScenarioError
from testbed.runtime.docker import container_spec
from testbed.scenario import DockerOptions, load_scenario_data
from testbed.topology import single_tor

BASE = {"name": "d", "topology": {"hosts": 3}}


def _spec(opts: DockerOptions, host: str = "h2") -> dict:
    s = load_scenario_data({**BASE, "runtime": "docker"}, "test")
    plan = single_tor(s, "abc123")
    return container_spec(plan, plan.host(host), "testbed-node:0123", "abc123", Path("/r/x"), opts)


def test_container_is_isolated_labelled_and_never_restarted() -> None:
    spec = _spec(DockerOptions())
    assert spec["name"] == "tb-abc123-h2"
    assert spec["hostname"] == "h2"
    assert spec["network_mode"] == "none"
    assert spec["init"] is True
    assert spec["restart_policy"] == {"Name": "no"}
    assert spec["labels"] == {"testbed.run": "abc123", "testbed.node": "h2"}
    # the run folder at the same path inside, so records and logs land where the host reads them
    assert spec["volumes"] == {"/r/x": {"bind": "/r/x", "mode": "rw"}}
    assert "nano_cpus" not in spec and "mem_limit" not in spec
    assert not spec.get("privileged") and not spec.get("cap_add")


def test_every_host_name_resolves_to_its_data_address() -> None:
    spec = _spec(DockerOptions())
    # the addresses of the default data prefix, h<i> → .<i> (hand-written, not from the plan)
    assert spec["extra_hosts"] == {"h1": "10.10.0.1", "h2": "10.10.0.2", "h3": "10.10.0.3"}


def test_limits_are_passed_per_host() -> None:
    spec = _spec(DockerOptions(cpus=0.5, memory="512MiB"))
    assert spec["nano_cpus"] == 500_000_000
    assert spec["mem_limit"] == 512 * 2**20
    assert spec["memswap_limit"] == 512 * 2**20


def test_docker_block_needs_the_docker_runtime() -> None:
    with pytest.raises(ScenarioError, match=r"docker: applies only with runtime: docker"):
        load_scenario_data({**BASE, "docker": {"cpus": 1}}, "test")


@pytest.mark.parametrize(
    ("field", "value", "where"),
    [("cpus", 0, "docker.cpus"), ("memory", "1MiB", "docker.memory"), ("nope", 1, "docker.nope")],
)
def test_bad_docker_options_name_the_field(field: str, value: object, where: str) -> None:
    with pytest.raises(ScenarioError, match=where.replace(".", r"\.")):
        load_scenario_data({**BASE, "runtime": "docker", "docker": {field: value}}, "test")
