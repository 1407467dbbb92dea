"""The ``memtui`` command line: one module per verb, each with ``SUMMARY``, ``add_arguments(parser)`` and
``run(args) -> int`` (and ``DESCRIPTION`` where the verb's help says more). A verb module imports what its work needs
inside ``run``, so building the parser (every start of ``memtui``) loads no numerics.

``VERBS`` maps each verb to its module, in the order ``memtui --help`` lists them."""

VERBS = {
    "app": "app",
    "serve": "serve",
    "info": "info",
    "estimate": "estimate",
    "export": "export",
    "instances": "instances",
    "compare": "compare",
    "plan": "plan",
    "calibrate": "calibrate",
    "sensitivity": "sensitivity",
    "provenance": "provenance",
    "import": "import_table",
    "sample": "sample",
    "build": "build",
    "covariates": "covariates",
    "extract": "extract",
    "status": "status",
    "fetch": "fetch",
    "demo": "demo",
}
