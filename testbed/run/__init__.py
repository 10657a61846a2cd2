"""One run's life cycle: the live loop (live.py), the orchestrator that builds, runs and ends
it, its guardian and ending (nothing left behind), access to a running run, the run's
Prometheus and metrics session, and the link budget's probes. Imports: everything below
(core/, workloads/, scenario/, network/), never results/ or the command."""
