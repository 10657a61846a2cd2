"""How many data addresses a topology needs: its schema checks that a prefix is large enough,
its plan (topology.py) hands them out."""

from __future__ import annotations

import math


def leaf_block(hosts_per_leaf: int) -> int:
    """Addresses of one leaf's subnet: its hosts, the gateway, network and broadcast."""
    return 2 ** math.ceil(math.log2(hosts_per_leaf + 3))


def data_addresses(kind: str, hosts: int, leaves: int = 1, spines: int = 1) -> int:
    """Addresses the data prefix must span: one subnet per leaf, then a /31 per fabric link."""
    if kind == "single-tor":
        return hosts + 2
    return leaves * leaf_block(hosts // leaves) + 2 * leaves * spines


def with_class_addresses(hosts: int, classes: int) -> int:
    """Addresses a single-ToR data prefix must span when a job gives its transfers classes of
    their own (training/policies/per_transfer.py): every host one more address per class."""
    return (1 + classes) * hosts + 2
