"""Where a node lives: a network namespace (netns.py, the default) or a Docker container
(docker.py). base.py is the seam every stage reaches a node through, namespaces.py the only
code that enters one, network.py the links every runtime shares, registry.py the choice
between them; what the schema knows of each runtime is scenario/runtimes.py. Imports: core/,
scenario/ and network/'s own modules; only this package enters a node
(tests/unit/test_layers.py)."""
