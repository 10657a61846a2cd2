"""The runtimes, by name: the one place where the scenario's `runtime` is read. Every stage
reaches nodes through the Runtime a run is given (runtime/base.py); the life cycle (a node
image to prepare, the runtime to create, teardown), `testbed exec` and `testbed down` ask the
runtime's kind here. Adding a runtime is a module with a Runtime and its kind, one line below,
and one line in declared.py (its name and options model, which the schema reads from there;
tests/unit/test_layers.py checks that the two name the same runtimes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from testbed.core.state import RunState
from testbed.network.runtime import docker, netns
from testbed.network.runtime.base import Runtime
from testbed.network.runtime.namespaces import names_with_prefix
from testbed.scenario.topology import TopologyPlan


class RuntimeKind(Protocol):
    name: str

    def prepare(self, s: Any, run_id: str, progress: Any) -> Any: ...  # e.g. a node image
    def create(
        self, plan: TopologyPlan, state: RunState, s: Any, run_dir: Path, prepared: Any,
        gpus: dict[str, list[int]], time_scale: float = 1.0,
    ) -> Runtime: ...  # fmt: skip  # s: the run's dilated twin; time_scale: its K
    def teardown(self, state: RunState) -> list[str]: ...  # what the state file records
    def exec_argv(
        self, st: RunState, host: dict[str, Any], command: list[str], tty: bool
    ) -> list[str]: ...
    def shell(self, prompt: str) -> list[str]: ...
    def gpu_access(self, s: Any) -> str | None: ...  # why the hosts cannot reach GPUs
    def node_python(self, s: Any) -> str: ...  # "this machine", "default image", "own image"
    def orphans(self) -> dict[str, list[str]]: ...  # run id → objects found by label only
    def remove_orphans(self, run_id: str) -> list[str]: ...


RUNTIMES: dict[str, RuntimeKind] = {"netns": netns.KIND, "docker": docker.KIND}


def get(name: str) -> RuntimeKind:
    return RUNTIMES[name]


def teardown(state: RunState) -> list[str]:
    """Delete what `state` records, on the runtime it records, then the files it recorded
    (an external Prometheus' file_sd entry); return problems (empty: clean)."""
    problems = get(state.runtime).teardown(state)
    for obj in state.objects:
        if obj["kind"] == "file":
            try:
                Path(obj["path"]).unlink(missing_ok=True)
            except OSError as e:
                problems.append(f"could not remove {obj['path']}: {e}")
    return problems


# What every runtime leaves in this machine's kernel (namespaces, the management network)
# found by name when no state file records it: `testbed down` removes it (runtime/netns.py).
strays = netns.strays
remove_strays = netns.remove_strays
namespaces_named = names_with_prefix  # a run id's names held by another run (orchestrator)
