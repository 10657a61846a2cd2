"""Where a node lives: a network namespace (netns.py, the default) or a Docker container
(docker.py). base.py is the seam every stage reaches a node through, network.py the links
every runtime shares, registry.py the choice between them."""
