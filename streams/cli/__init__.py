"""The ``distill`` command line."""
