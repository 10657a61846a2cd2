"""Foundations every layer uses, importing nothing of testbed's outside core/: the units,
fields and tc profiles of the scenario's language, errors, the run's state file and stop flag,
the time window, addresses and paths, the host's CPU and TCP counters, the summary's shape,
statistics over raw records, run folders, and what node programs export to Prometheus."""
