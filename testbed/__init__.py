"""testbed: emulate a data-center network in Linux namespaces and measure what training does to it."""

__version__ = "0.1.0"
