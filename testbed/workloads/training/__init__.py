"""Training jobs (kinds horovod and torch-ddp): spec.py (the configuration, derived values,
summary shape), the controllers (controller.py, horovod.py, ddp.py, gpus.py), the report and
Horovod's timeline read back; workers/ (the programs inside nodes), model/ (the models' layers
and the event model) and policies/ (a job's `policy:` and their runners)."""
