"""`testbed sweep FILE --swarm` from start to end: refuse what cannot work before anything
starts (no swarm, not a manager, a point that names a local file, no node able to run
points), then the image, the registry, a probe of every node's kernel, the receiver, and the
dispatcher. Every refusal is one line (exit 1 or 2, as elsewhere)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.core.errors import EnvironmentProblem
from testbed.core.stopping import signals_flag
from testbed.results.swarm import cluster, dispatch
from testbed.results.swarm.image import Registry, runner_image
from testbed.results.swarm.results import Receiver
from testbed.results.sweep import Outcome, Point, SweepSpec


def usable_nodes(c: Any) -> list[cluster.Node]:
    nodes = [n for n in cluster.nodes(c) if n.usable]
    if not nodes:
        raise EnvironmentProblem(
            "--swarm: no node of the swarm is ready and active (`docker node ls`)"
        )
    return nodes


def check_kernels(probes: dict[str, dict[str, Any]], nodes: list[cluster.Node]) -> None:
    """Every node that would take points can run them; one line naming the first that cannot."""
    for n in nodes:
        p = probes.get(n.id, {})
        if "error" in p:
            raise EnvironmentProblem(
                f"--swarm: node {n.hostname} did not answer the kernel probe ({p['error']}); "
                f"drain it (docker node update --availability drain {n.hostname}) or fix it"
            )
        if p.get("missing"):
            how = "; ".join(p.get("how", {}).values())
            raise EnvironmentProblem(
                f"--swarm: node {n.hostname}'s kernel lacks {', '.join(p['missing'])} ({how}); "
                f"drain it (docker node update --availability drain {n.hostname}) or fix it"
            )


def sweep(
    spec: SweepSpec,
    points: list[Point],
    out: Path,
    ui: Any,
    say: Callable[[str], None],
    only: set[int] | None = None,
) -> list[Outcome]:
    """Run the points not finished before (of `only`'s indices, where given) on the swarm."""
    with signals_flag():  # Ctrl-C, SIGTERM, SIGHUP: every task of the sweep stopped first
        return _sweep(spec, points, out, ui, say, only)


def _sweep(
    spec: SweepSpec,
    points: list[Point],
    out: Path,
    ui: Any,
    say: Callable[[str], None],
    only: set[int] | None,
) -> list[Outcome]:
    dispatch.portable(points)
    c = cluster.client()
    manager = cluster.manager_address(c)
    stale = dispatch.remove_stale(c)
    if stale:
        say(f"removed {stale} service(s) and config(s) of swarm sweeps killed earlier here")
    nodes = usable_nodes(c)
    image = runner_image(c, say)
    with Registry(manager) as registry:
        ref = registry.push(c, image, say)
        sweep_id = dispatch.new_sweep_id()
        say(f"probing the kernels of {len(nodes)} node(s) (each pulls {ref} first)")
        check_kernels(dispatch.probe_nodes(c, ref, sweep_id, nodes), nodes)
        receiver = Receiver(manager)
        try:
            say(f"sweep {sweep_id}: {len(points)} points on {', '.join(n.hostname for n in nodes)}")
            return dispatch.Dispatcher(
                c, spec, points, out, ui, ref, receiver, nodes, sweep_id, only=only
            ).run()
        finally:
            receiver.close()
