"""The built-in data sets, one module each; every module defines ``DATASET`` (a ``DatasetSpec``).

Adding a data set is adding a module here (see ``docs/adding_a_dataset.md``): the registry
imports every module of this package whose name does not start with ``_``.
"""
