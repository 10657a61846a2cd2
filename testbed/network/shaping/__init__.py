"""Link shaping: tc profiles (profile.py), the pure plan (plan.py), applying it through
pyroute2 (apply.py) and class counters (stats.py); what the kernel can do is
runtime/kernel_probe.py's question."""
