"""The container a host becomes: what Docker is asked for, computed without an engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.core.errors import ScenarioError
from testbed.network.runtime.docker import container_spec
from testbed.scenario.resolve import load_scenario_data
from testbed.scenario.runtimes import DockerOptions
from testbed.scenario.topology import single_tor

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


def test_gpus_are_passed_through_with_what_nccl_needs() -> None:
    s = load_scenario_data({"name": "g", "runtime": "docker", "topology": {"hosts": 2}}, "test")
    plan = single_tor(s, "abc123")
    assert s.docker is not None
    spec = container_spec(
        plan, plan.host("h1"), "img", "abc123", Path("/r/x"), s.docker, gpus=[0, 3]
    )
    (req,) = spec["device_requests"]
    assert req["DeviceIDs"] == ["0", "3"] and req["Capabilities"] == [["gpu"]]
    assert spec["shm_size"] == "1g"
    (ulimit,) = spec["ulimits"]
    assert (ulimit["Name"], ulimit["Soft"], ulimit["Hard"]) == ("memlock", -1, -1)
    plain = container_spec(plan, plan.host("h1"), "img", "abc123", Path("/r/x"), s.docker)
    assert not {"device_requests", "shm_size", "ulimits"} & set(plain)


def test_nccl_is_kept_on_the_shaped_interface() -> None:
    from testbed.workloads.training.horovod import nccl_env

    s = load_scenario_data(
        {"name": "n", "topology": {"hosts": 2},
         "workloads": {"horovod": {"backend": "torch-ddp", "nccl_socket_threads": 4}}},
        "test",
    )  # fmt: skip
    env = nccl_env(s.workloads.horovod)
    # sockets on eth0 only, no InfiniBand, no plugin, no P2P/SHM shortcut around the links
    assert env["NCCL_SOCKET_IFNAME"] == "=eth0" and env["NCCL_NET"] == "Socket"
    assert env["NCCL_IB_DISABLE"] == env["NCCL_P2P_DISABLE"] == env["NCCL_SHM_DISABLE"] == "1"
    assert env["NCCL_SOCKET_NTHREADS"] == "4" and "NCCL_NSOCKS_PERTHREAD" not in env
