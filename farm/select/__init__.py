"""Kernel-selection models: features (features.py), training (train.py), evaluation against the
measured oracle (evaluate.py), the model registry (registry.py), bundles and the C export
(export.py, cexport.py) and the runtime Selector (selector.py). Import the modules you need;
this package imports nothing heavy so that the `farm` command starts fast."""
