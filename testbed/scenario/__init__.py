"""The scenario: its schema (schema.py) and reference, the runtimes it may name, the topology
and its plan, what it resolves to (resolve.py, dilation.py), the link budget's arithmetic, and
what a run or a sweep expects of it (expect.py, aims.py). Pure data: nothing here touches the
machine. Imports: core/ and the kinds' declared half (workloads/)."""
