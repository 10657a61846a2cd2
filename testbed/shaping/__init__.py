"""Link shaping: tc profiles (profile.py), the pure plan (plan.py), applying it through
pyroute2 (apply.py), kernel capability probing (probe.py) and class counters (stats.py)."""
