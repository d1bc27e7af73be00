"""What every verb shares: the run spec and its rules (spec, planning), the measuring engine and the
parent/child event protocol (engine, events), errors and failures, provenance, the backends and
datasets, the suites, and the models of memory (sizing), speed (predict) and cost (pricing).

Nothing is imported here: gpuscout.core.events is imported inside a user's watched script, whose
interpreter may have only the standard library."""
