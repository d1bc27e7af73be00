"""Stored runs in the experiment trackers teams already run (issue 63): what a run says to one
(fields.py) and MLflow's side (mlflow_runs.py). The store is always written first; a tracker
only ever receives a copy."""
