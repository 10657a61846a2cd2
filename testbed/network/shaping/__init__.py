"""Link shaping: the pure plan (plan.py), applying it through pyroute2 (apply.py), the
shared-limit and sock_ops BPF programs, the uplinks' ifb queues, and class counters
(stats.py); the tc profiles themselves are core/profile.py, and what the kernel can do is
runtime/kernel_probe.py's question. Imports: core/, scenario/ and network/'s own modules."""
