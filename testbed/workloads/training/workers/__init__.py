"""The programs that run inside a node for a training job (Horovod's and torch-DDP's workers,
DDP's scheduled loop and its store, Horovod's rendezvous) and what they export. Imports: core/
and model/ only, as a node's Python has nothing else to lean on."""
