"""The ground floor, what every floor above shares: the run spec (spec), the parent/child event
protocol (events), errors and failures, provenance, the versions, the backends and datasets,
inputs and outputs (files read and written), units, text, signals, decisions and steps.

Nothing is imported here: gpuscout.core.events is imported inside a user's watched script, whose
interpreter may have only the standard library."""
