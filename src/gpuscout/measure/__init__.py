"""The measuring engine: what is measured in, stored records out. Every verb that measures goes
through here; nothing below it imports it (pyproject's import-linter contracts).

- Standard workloads (or a user's model): plans.py turns what was asked into validated specs,
  rules.py holds every rule a planned run must follow (bad input stops there, exit 2), and
  engine.py starts the child (executor), samples NVML (telemetry), derives the records
  (analysis) and stores them (store).
- A user's own command: command.py checks it and builds the instrumentation that reaches its
  processes (a notebook file runs through notebook_runner.py), watching.py runs it to its end
  with its GPUs sampled (gpus.py) and shows it through a View (view.py): watch, tune and sweep
  all measure a script this way.
"""
