"""The emulated network on this machine: where nodes live (runtime/, the one seam every stage
reaches a node through), the links' shaping (shaping/: the tc plan as data, then applied),
netlink, the node images and the preflight checks of what the kernel and machine offer.
Imports: core/, workloads/' declared half and scenario/."""
