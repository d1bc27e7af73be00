"""The measuring engine: a spec in, stored records out. planning.py holds every rule a planned run
must follow (bad input stops there, exit 2); engine.py starts the child (executor), samples NVML
(telemetry), derives the records (analysis) and stores them (store). Every verb that measures
goes through here; nothing below it imports it."""
