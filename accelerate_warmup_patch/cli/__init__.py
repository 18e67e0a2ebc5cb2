"""The command line, ``accelerate-warmup-patch``: code that runs in no training job.

Each command asks the runtime (the package's modules one floor up) or a child interpreter of the job's
environment, and nothing in the runtime imports this subpackage: ``main`` parses and dispatches, ``doctor``,
``doctor_config`` and ``status_report`` answer for an environment, ``demo`` trains on this node, ``audit``
reads finished runs' checkpoints (``checkpoint_pickle``, ``config_facts``), ``child`` is the one way to ask a
child interpreter.
"""
