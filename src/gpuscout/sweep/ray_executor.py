"""`gpuscout sweep --executor ray`: the same trials as Ray tasks, one GPU (or one CPU with
--cpu-slots) each through Ray's resource scheduling; each task still runs its trial in a child
process of its own. Results come back to the driver, which writes the store."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from dataclasses import asdict
from pathlib import Path

from gpuscout.core.errors import UsageError, host_port
from gpuscout.record.run import RunRecord
from gpuscout.sweep.expansion import Trial
from gpuscout.sweep.runner import Slot, TrialResult
from gpuscout.sweep.schedule import Hooks
from gpuscout.sweep.spec import SweepFile

CONNECT_TIMEOUT_S = 3.0
# How often the driver looks at the cluster's nodes (and renews its leases) while trials run
NODE_CHECK_S = 2.0


def _remote_trial(
    sweep_json: dict, trial: dict, log_root: str, cache: str, spec_json: str | None, on_cpu: bool
) -> dict:
    """One trial on a Ray worker: its result, and (workload sweeps) its records as JSON for the
    driver to store."""
    import ray

    from gpuscout.core.spec import RunSpec
    from gpuscout.measure import engine
    from gpuscout.sweep.runner import TrialRunner
    from gpuscout.telemetry.nvml import Nvml

    ids = [] if on_cpu else ray.get_gpu_ids()
    node = ray.get_runtime_context().get_node_id()[:8]
    slot = Slot(f"ray:{node}:gpu{int(ids[0])}" if ids else f"ray:{node}:cpu", int(ids[0]) if ids else None)
    sweep, trial = SweepFile(**sweep_json), Trial(**trial)
    with Nvml() as nvml:
        specs = {trial.key: RunSpec.model_validate_json(spec_json)} if spec_json else {}
        session = engine.Session(nvml, engine.MeasureOptions(timeout_s=sweep.timeout_s)) if spec_json else None
        runner = TrialRunner(  # one trial
            sweep, Path(log_root), specs=specs, session=session, warm_start=False, cache=Path(cache)
        )
        try:
            result = runner.run(trial, slot, threading.Event())
        finally:
            runner.close()
    # to the driver through Ray: the result's fields, its records as JSON (their types rebuilt there)
    return result.model_dump() | {"records": [r.model_dump_json() for r in result.records]}


def run_ray(
    trials: list[Trial],
    sweep: SweepFile,
    address: str | None,
    on_cpu: bool,
    log_root: Path,
    cache: Path,
    specs: dict,
    hooks: Hooks,
) -> str | None:
    """Each trial as a Ray task, claimed (a lease in the store) before it is submitted; the driver
    renews its leases while it waits for results."""
    try:
        import ray
    except ImportError:
        raise UsageError("--executor ray needs Ray: pip install 'gpuscout[ray]'") from None
    with _stdout_to_stderr():  # Ray's own messages (a node that died) never mix into --json
        try:
            ray.init(address=address, ignore_reinit_error=True, include_dashboard=False, log_to_driver=False)
        except Exception as exc:  # a cluster of another Ray version, or of another auth mode
            raise UsageError(
                f"cannot join the Ray cluster at {address or 'a new local instance'}: "
                f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            ) from None
        try:
            return _run(ray, trials, sweep, on_cpu, log_root, cache, specs, hooks)
        finally:
            ray.shutdown()


def answering(address: str) -> None:
    """HOST:PORT of a Ray head answers a TCP connection within seconds; else one line, exit 2
    (ray.init would wait for it far longer)."""
    if address == "auto":  # Ray's own: the cluster this machine runs
        return
    if host_port(address) is None:
        raise UsageError(
            f"--address must be HOST:PORT of a Ray head (ray start --head prints it; ports 1 to 65535), "
            f"got {address[:80]!r}"
        )
    host, port = host_port(address)
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise UsageError(
            f"nobody answers at {address} ({exc.strerror or exc}): start the cluster's head there with "
            f"`ray start --head --port {port}`, or give its address"
        ) from None


@contextlib.contextmanager
def _stdout_to_stderr():
    """File descriptor 1 points at stderr for the block (Ray's C++ core writes to it directly)."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _alive_nodes(ray) -> dict[str, str]:
    return {n["NodeID"][:8]: n.get("NodeManagerAddress", "?") for n in ray.nodes() if n.get("Alive")}


def _run(
    ray, trials: list[Trial], sweep: SweepFile, on_cpu: bool, log_root: Path, cache: Path, specs: dict, hooks: Hooks
) -> str | None:
    resources = {"num_cpus": 1} if on_cpu else {"num_gpus": 1, "num_cpus": 1}
    if not on_cpu and not ray.cluster_resources().get("GPU"):
        raise UsageError("the Ray cluster has no GPUs: give --cpu-slots to run trials on CPUs")
    task = ray.remote(**resources)(_remote_trial)
    pending = {}
    for trial in trials:
        if not hooks.claim(trial, Slot("ray", None)):
            continue
        spec = specs.get(trial.key)
        ref = task.remote(  # the file's own settings: read again, the rule's checks see what the user set
            sweep.model_dump(exclude_unset=True),
            asdict(trial),
            str(log_root),
            str(cache),
            spec.model_dump_json() if spec else None,
            on_cpu,
        )
        pending[ref] = trial
        hooks.started(trial, Slot("ray", None))
    consecutive, reason = 0, None
    nodes = _alive_nodes(ray)
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=NODE_CHECK_S)
            hooks.tick()
            now = _alive_nodes(ray)
            for node in sorted(set(nodes) - set(now)):  # Ray runs its tasks again elsewhere (max_retries)
                hooks.noted(f"Ray node {node} ({nodes[node]}) died: the trials it ran are run again on the others")
            nodes = now
            if not done:
                continue
            ref = done[0]
            pending.pop(ref)
            data = ray.get(ref)
            records = [RunRecord.model_validate_json(r) for r in data.pop("records")]
            result = TrialResult(**data, records=records)
            hooks.finished(result)
            consecutive = 0 if result.status == "ok" else consecutive + 1
            if consecutive >= sweep.max_consecutive_failures:
                reason = (
                    f"{consecutive} trials failed in a row (the last: {result.message}); stopped as "
                    f"max_consecutive_failures = {sweep.max_consecutive_failures} asks"
                )
                for other in pending:
                    ray.cancel(other, force=True)
                break
    except KeyboardInterrupt:
        for other in pending:
            ray.cancel(other, force=True)
        raise
    return reason
