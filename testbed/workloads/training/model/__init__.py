"""A job's model: the layer profiles of the models it emulates (models.py), a synthetic job's
layers and fusion (synthetic.py) and the event model of a data-parallel iteration
(predict.py, thesis ch. 4) that `testbed predict`, the report and the policies use."""
