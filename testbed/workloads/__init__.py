"""The workload kinds, one package per kind (linkcheck/, websearch/, incast/, ensemble/,
training/), registered by name (registry.py, kinds.py). A kind's folder spans two layers: its
declared half (spec.py, the node programs, what the scenario lists and a node's Python runs)
imports only core/; its running half (controller.py, report.py, and the shared controller.py,
procs.py and marking.py here) may import scenario/ and network/ as well, never run/ or
results/ (tests/unit/test_layers.py)."""
