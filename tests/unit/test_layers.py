"""testbed's modules import downward only: no cycle among them, imports inside functions and
under TYPE_CHECKING included (a cycle there is one a refactoring turns into an ImportError)."""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "testbed"


def module_graph() -> dict[str, set[str]]:
    mods: dict[str, Path] = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = p

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        pkg = m if p.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(p.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for t in targets:
                if t.startswith("testbed") and (k := known(t)) and k != m:
                    graph[m].add(k)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles_in_testbed():
    graph = module_graph()
    assert len(graph) > 50, "the walk found too few modules"
    found = cycles(graph)
    assert found == [], "import cycles: " + "; ".join(" ↔ ".join(c) for c in found)


def test_the_cycle_finder_finds_one():
    """So that the test above can fail: a made-up graph with a cycle through a function."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_runtime_is_named_outside_runtime():
    """Every stage reaches nodes through the runtime it is given; only runtime/ branches on a
    runtime's name (and the schema, which lists the runtimes and their options)."""
    import re

    branch = re.compile(r"runtime\s*[!=]=\s*[\"'](docker|netns)[\"']")
    offenders = []
    for p in PACKAGE.rglob("*.py"):
        rel = p.relative_to(PACKAGE)
        if rel.parts[:2] == ("network", "runtime") or rel.as_posix() == "scenario/schema.py":
            continue
        offenders += [f"{rel}: {m.group(0)}" for m in branch.finditer(p.read_text())]
    assert offenders == []


SCHEMA = ("scenario/schema.py", "scenario/reference.py")  # the schema and its reference


def _outside_runtime() -> list[tuple[Path, ast.Module]]:
    return [
        (p.relative_to(PACKAGE), ast.parse(p.read_text()))
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.relative_to(PACKAGE).parts[:2] != ("network", "runtime")
    ]


def node_access(rel: Path, tree: ast.Module, runtime_names: tuple[str, ...]) -> list[str]:
    """What in one module outside runtime/ reaches into a node or names a runtime: an import
    of pyroute2's netns, of runtime/namespaces.py or of a runtime's own module; a setns or
    nsenter call; a namespace's path; in the schema's modules, a runtime's name."""
    forbidden = {"pyroute2.netns", "testbed.network.runtime.namespaces"}
    forbidden |= {f"testbed.network.runtime.{n}" for n in runtime_names}
    schema = rel.as_posix() in SCHEMA  # "netns" elsewhere may be a kind of object, not a runtime
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        out += [f"{rel}:{node.lineno}: imports {n}" for n in names if n in forbidden]
        if isinstance(node, ast.Attribute | ast.Name) and (
            getattr(node, "attr", None) == "setns" or getattr(node, "id", None) == "setns"
        ):
            out.append(f"{rel}:{node.lineno}: setns")
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            v = node.value
            if "/run/netns" in v or (v == "nsenter" and rel.name != "preflight.py"):
                out.append(f"{rel}:{node.lineno}: {v[:40]!r}")
            if schema and v in runtime_names:
                out.append(f"{rel}:{node.lineno}: names runtime {v!r}")
    return out


def test_no_module_outside_runtime_opens_a_namespace_or_names_a_runtime():
    """A runtime whose nodes live elsewhere (another machine) replaces runtime/, not its
    callers: every other stage reaches a node through the Runtime it is given (netlink
    sockets, /proc, processes), and the schema lists runtimes from scenario/runtimes.py."""
    from testbed.scenario import runtimes as declared

    names = declared.names()
    found = [hit for rel, tree in _outside_runtime() for hit in node_access(rel, tree, names)]
    assert found == []


def test_node_access_is_found():
    """So that the test above can fail: each kind of access, in made-up modules."""
    code = (
        "from pyroute2 import netns\n"
        "import testbed.network.runtime.docker\n"
        "from testbed.network.runtime.namespaces import inside\n"
        "os.setns(fd, 0)\n"
        "p = '/run/netns/x'\n"
    )
    hits = node_access(Path("live.py"), ast.parse(code), ("netns", "docker"))
    assert sorted(h.split(": ", 1)[1] for h in hits) == [
        "'/run/netns/x'",
        "imports pyroute2.netns",
        "imports testbed.network.runtime.docker",
        "imports testbed.network.runtime.namespaces",
        "setns",
    ]
    schema = node_access(Path("scenario/schema.py"), ast.parse("x = 'docker'"), ("netns", "docker"))
    assert schema == ["scenario/schema.py:1: names runtime 'docker'"]


def test_declared_runtimes_are_the_registered_ones():
    """The schema's runtimes (scenario/runtimes.py) and the runtimes a run can make
    (runtime/registry.py) are the same names."""
    from testbed.network.runtime import registry
    from testbed.scenario import runtimes as declared

    assert set(declared.names()) == set(registry.RUNTIMES)
    for name, kind in registry.RUNTIMES.items():
        assert kind.name == name
    from testbed.core.state import RunState

    assert RunState.__dataclass_fields__["runtime"].default == declared.DEFAULT


# The layers of README.md's map, bottom to top, as the packages of testbed/ (each package's
# docstring says the same): a module imports from its own package's layer or below. The one
# package that spans two layers is workloads/, as a kind is one folder (containerlab's nodes/):
# its declared half (specs, node programs, the policies' fields, the job's model) sits under
# the scenario, which lists the kinds; its running half (controllers, reports, the policies'
# runners) sits above the network it drives. A pattern with * is a kind's module by its role;
# the most specific pattern wins.
LAYERS: list[tuple[str, list[str]]] = [
    ("foundations", ["testbed", "testbed.core", "testbed.core.*"]),
    ("the kinds, declared", ["testbed.workloads", "testbed.workloads.*"]),
    ("the scenario", ["testbed.scenario", "testbed.scenario.*"]),
    ("the network", ["testbed.network", "testbed.network.*"]),
    ("workloads running", ["testbed.workloads.controller", "testbed.workloads.procs",
                           "testbed.workloads.marking",
                           "testbed.workloads.*.controller", "testbed.workloads.*.report",
                           "testbed.workloads.training.ddp", "testbed.workloads.training.horovod",
                           "testbed.workloads.training.gpus",
                           "testbed.workloads.training.timeline",
                           "testbed.workloads.training.model.predict",
                           "testbed.workloads.training.policies.*"]),
    ("the life cycle", ["testbed.run", "testbed.run.*"]),
    ("results", ["testbed.results", "testbed.results.*"]),
    ("the command", ["testbed.cli"]),
]  # fmt: skip

# The declared half of a kind's folder: what the scenario (and a node's Python) may import.
DECLARED = ["testbed.workloads.training.policies", "testbed.workloads.training.policies.ranking"]


def layer_of(module: str) -> int | None:
    if module in DECLARED:
        return 1
    best: tuple[tuple[bool, int], int] | None = None
    for i, (_, patterns) in enumerate(LAYERS):
        for p in patterns:
            if module == p or ("*" in p and fnmatch.fnmatch(module, p)):
                score = ("*" not in p, len(p))
                if best is None or score > best[0]:
                    best = (score, i)
    return best[1] if best else None


def upward(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for m, targets in sorted(graph.items()):
        for t in sorted(targets):
            a, b = layer_of(m), layer_of(t)
            if a is not None and b is not None and b > a:
                out.append(f"{m} ({LAYERS[a][0]}) imports {t} ({LAYERS[b][0]})")
    return out


def test_imports_go_downward_only():
    graph = module_graph()
    unplaced = [m for m in graph if layer_of(m) is None]
    assert unplaced == [], f"modules in no layer (add them to LAYERS): {unplaced}"
    assert upward(graph) == []


def test_an_upward_import_is_found():
    assert upward(
        {"testbed.core.units": {"testbed.cli"}, "testbed.cli": {"testbed.core.units"}}
    ) == ["testbed.core.units (foundations) imports testbed.cli (the command)"]
