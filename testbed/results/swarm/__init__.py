"""Sweeps across a Docker Swarm (`testbed sweep FILE --swarm`): each point of the sweep runs as a
one-shot Swarm service on a node of the swarm this machine's engine manages, and its run
folder comes back into the same `DIR/runs/NNN-…/` a local sweep writes.

Why it is shaped this way:

- A point's task container has a network namespace of its own (no host networking), and the
  run it starts builds everything inside it: namespaces, veths, bridges, qdiscs, processes. When
  the task ends, however it ends (the run's own teardown, SIGKILL, a node's engine restarting),
  the kernel removes all of it with the container's namespaces: nothing a point makes can be
  left on a node. Inside, `testbed up` is the same command a user runs, with its guardian.
- The point's resolved scenario reaches it as a Docker config; its run folder comes back as a
  gzip'd tar the task PUTs to a small HTTP receiver the sweep runs on the manager's swarm
  address (traffic between the machines of the swarm only). Service logs carry text, not
  folders, and a worker's engine is not reachable from the manager.
- Images reach nodes through a registry the manager runs for the sweep (Debian's
  `docker-registry`): a worker's engine can pull, but nothing can load an image into it from
  outside, and no outside registry is reachable. Nodes allow it as an insecure registry.
- At most one point runs on a node at a time (the sweep schedules, and reserves the node's
  CPUs), so points never share a machine's CPU; a node that goes down mid-point has the point
  run again elsewhere.

Imports: any layer below results/ (inside its task a point runs `testbed up`, the command).
"""
