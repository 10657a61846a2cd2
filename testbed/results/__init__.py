"""What runs leave, read back: a run's report, sweeps (sweep.py) and their aggregates,
verdicts and seeds until decided (decide.py), the HTML page, the terminal's views, and sweeps
across a Docker Swarm (swarm/). Imports: any layer below; only cli.py imports it."""
