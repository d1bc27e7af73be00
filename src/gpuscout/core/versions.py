"""The package's versions, on the ground floor: every floor stamps what it makes with them
without importing the package's front door (gpuscout/__init__.py, which names the notebook API
and would tie every package into one import cycle, issue 61)."""

__version__ = "0.1.0"

# Bump whenever the way of measuring changes (docs/methodology.md); records of another
# methodology are never mixed in comparisons.
METHODOLOGY_VERSION = 1

# The stored record's shape (gpuscout.record; version 2: typed parts -- inference, cost,
# distribution --, units_per_sample, the record's kind). Here with the other versions, so that the
# ground floor (core/provenance.py) stamps it without importing the record above it.
SCHEMA_VERSION = 2
