"""Where a node lives: a network namespace (netns.py, the default); containers come later."""
