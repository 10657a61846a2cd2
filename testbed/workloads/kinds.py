"""The built-in workload kinds, and the one way the rest of testbed reads the registry: import
this module (which registers them), then `get(name)`. A new kind adds its spec module here."""

from __future__ import annotations

from testbed.workloads.ensemble import spec as _ensemble  # noqa: F401
from testbed.workloads.incast import spec as _incast  # noqa: F401
from testbed.workloads.linkcheck import spec as _linkcheck  # noqa: F401
from testbed.workloads.registry import KINDS, Kind
from testbed.workloads.training import spec as _training  # noqa: F401
from testbed.workloads.websearch import spec as _websearch  # noqa: F401


def get(name: str) -> Kind:
    """The kind of that name; KeyError names the kinds there are."""
    try:
        return KINDS[name]
    except KeyError:
        raise KeyError(
            f"{name!r} is not a workload kind; kinds: {', '.join(sorted(KINDS))}"
        ) from None


def names() -> list[str]:
    return sorted(KINDS)
