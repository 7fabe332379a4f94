"""pytest-tfperf: performance regression tests for TensorFlow pipelines, as a pytest plugin.

The layer folders of docs/architecture.md, lowest first: ``profiling``, ``storage``,
``probes``, ``measuring``, ``diagnoses``, ``gates``, ``reports``, ``session``,
``cli``; ``model``, ``stats`` and ``config`` sit below them all and ``plugin``
above. Features that span layers have a folder each (``input_bound``,
``explain``, ``bisect``, ``against``), each module of it placed in its layer. A module
imports only its own layer and those below (tests/unit/test_layers.py).
Nothing is imported here, so loading the plugin stays light.
"""
