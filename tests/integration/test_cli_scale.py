"""`gpuscout scale` through the real CLI: MirroredStrategy and DataParallel over logical CPU
devices, MultiWorkerMirroredStrategy with two local workers and as printed for two hosts, the
hang watchdog and the straggler flag with a fake worker and fake GPUs, and bad input."""

import json
import shlex
import subprocess
import sys

import pytest

from gpuscout.store import Store
from tests.cli_checks import cli_env, gone, gpuscout
from tests.conftest import run_cli

QUICK = ["--windows", "3", "--window-seconds", "0.3", "--warmup-steps", "2"]


def stored(store) -> list[dict]:
    """The store's records in their stored (JSON) shape."""
    return [r.model_dump(mode="json") for r in store.list()]


def _points(report):
    return {p["devices"]: p for p in report["points"]}


def test_mirrored_strategy_over_two_cpu_devices(store_path):
    result = run_cli(
        "scale",
        "mlp",
        "--cpu",
        "--gpu-counts",
        "2",
        "--backend",
        "tensorflow",
        "--json",
        *QUICK,
        "--store",
        str(store_path),
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    points = _points(report)
    assert sorted(points) == [1, 2] and report["notes"]  # the 1-device run was added, and said so
    one, two = points[1], points[2]
    assert two["batch_size"] == 512 and two["per_device_batch_size"] == 256  # weak: global batch grows
    assert two["speedup"]["ratio"] == pytest.approx(two["samples_per_s"] / one["samples_per_s"])
    assert two["efficiency"]["value"] == pytest.approx(two["speedup"]["ratio"] / 2)
    assert two["speedup"]["ci95_low"] <= two["speedup"]["ratio"] <= two["speedup"]["ci95_high"]
    # CPU devices share cores: the verdict says so instead of blaming the GPUs' links
    if not two["meets_expectation"]:
        assert two["causes"][0]["code"] == "cpu_devices" and not report["verdict"]["ok"]
    with Store(store_path) as store:
        runs = {r["devices"]: r for r in stored(store)}
    assert runs[2]["distribution"] == {
        "kind": "mirrored",
        "strategy": "MirroredStrategy",
        "replicas": 2,
        "all_reduce": "CollectiveAllReduce",
        "params": runs[2]["distribution"]["params"],
        "batchnorm_layers": 0,
        "batchnorm": "per_replica",
        "collectives": None,  # XLA's program is jax's only
        "gradient_bucket_bytes": None,  # jax's per-replica step makes buckets
        "workers": None,
        "worker_run_ids": None,
        "addresses": None,
    }
    assert runs[2]["spec"]["batchnorm"] == "per_replica" and runs[1]["spec"]["batchnorm"] is None
    assert runs[1]["distribution"]["replicas"] == 1 and runs[2]["scale"]["session"] == report["session"]
    assert "MirroredStrategy.run" in runs[2]["env"]["compiled"] and runs[2]["xla"] is False
    assert (store_path.parent / "scale" / f"{report['session']}.json").exists()


def test_jax_data_parallel_per_replica_and_global_batchnorm_strong_scaling(store_path):
    args = [
        "scale",
        "mlp",
        "--cpu",
        "--gpu-counts",
        "1,2",
        "--backend",
        "jax",
        "--mode",
        "strong",
        "--batch-size",
        "256",
        *QUICK,
        "--store",
        str(store_path),
    ]
    result = run_cli(*args, env={"COLUMNS": ""})
    assert result.returncode == 0, result.stderr
    assert "strong scaling on logical CPU devices" in result.stdout and "batch norm per GPU" in result.stdout
    row = next(line for line in result.stdout.splitlines() if line.startswith("│ 2 "))
    assert "│ 128 " in row  # strong: the global 256 split over 2
    assert "verdict" in result.stdout
    synced = run_cli(*args, "--batchnorm", "global", "--json")
    assert synced.returncode == 0, synced.stderr
    assert json.loads(synced.stdout)["batchnorm"] == "global"
    with Store(store_path) as store:
        twos = {r["spec"]["batchnorm"]: r for r in stored(store) if r["devices"] == 2}
    assert twos["per_replica"]["distribution"]["strategy"] == "jax.shard_map data parallel (gpuscout)"
    assert twos["global"]["distribution"]["strategy"] == "keras.distribution.DataParallel"
    # What the compiled per-replica step sends, read from its program: by hand, every float32
    # gradient, the loss tracker's total and count, and the logged loss (mlp has no batch norm); on
    # the CPU one synchronous all-reduce, nothing beside it. The verdict says it.
    dist = twos["per_replica"]["distribution"]
    assert dist["collectives"] == {
        "collectives": 1,
        "payload_bytes": 4 * dist["params"] + 4 * 3,
        "asynchronous": 0,
        "beside_compute": 0,
        "payload_bytes_beside_compute": 0,
    }
    # mlp's float32 gradients are under 8 MiB: its bucket is the smallest, 1 MiB (jax_replicas'
    # rule), all gradients in one; the record keeps the size, the verdict names it
    assert 4 * dist["params"] < 8 * 2**20 and dist["gradient_bucket_bytes"] == 2**20
    assert twos["global"]["distribution"]["gradient_bucket_bytes"] is None
    assert "gradients in 1 MiB buckets made by the step" in result.stdout
    assert (
        twos["global"]["distribution"]["collectives"]["payload_bytes"] >= 4 * dist["params"]
    )  # XLA's partitioner's own
    assert "; as compiled, " in json.loads(synced.stdout)["verdict"]["summary"]
    assert {r["batch_size"] for r in twos.values()} == {256}
    # compare tells the two apart, each group holding only its own runs
    by_stats = run_cli("compare", "--by", "batchnorm", "--json", "--store", str(store_path))
    assert by_stats.returncode == 0, by_stats.stderr
    [comparison] = json.loads(by_stats.stdout)["comparisons"]
    assert comparison["held"]["devices"] == 2
    assert {g["label"]: g["run_ids"] for g in comparison["groups"]} == {stats: [r["id"]] for stats, r in twos.items()}
    out = store_path.parent / "r.html"
    assert run_cli("report", "--out", str(out), "--store", str(store_path)).returncode == 0
    scaling = out.read_text().split('<section id="scaling">')[1].split("</section>")[0]
    assert '<figure class="plot"><svg' in scaling and "scaling (dashed: linear from one device)" in scaling


def test_two_local_workers_of_multi_worker_mirrored(store_path):
    result = run_cli(
        "scale",
        "mlp",
        "--cpu",
        "--gpu-counts",
        "2",
        "--backend",
        "tensorflow",
        "--local-workers",
        "--json",
        *QUICK,
        "--store",
        str(store_path),
    )
    assert result.returncode == 0, result.stderr
    two = _points(json.loads(result.stdout))[2]
    with Store(store_path) as store:
        records = stored(store)
    merged = next(r for r in records if r["id"] == two["run_id"])
    workers = sorted(
        (r for r in records if r["scale"].get("role") == "worker" and r["cluster"]["workers"] == 2),
        key=lambda r: r["cluster"]["index"],
    )
    assert [w["cluster"]["index"] for w in workers] == [0, 1]
    assert merged["distribution"]["worker_run_ids"] == [w["id"] for w in workers]
    assert all(w["distribution"]["strategy"] == "CollectiveAllReduceStrategy" for w in workers)
    assert {w["steps_per_window"] for w in workers} == {workers[0]["steps_per_window"]}  # agreed window length
    assert merged["samples_per_s"] == pytest.approx(
        sorted(sum(ws) for ws in zip(*([w["throughput"] for w in x["windows"]] for x in workers)))[1]
    )


def test_forwarding_a_run_to_hosts_keeps_every_option_given():
    given = [
        "--gpu-counts",
        "2",
        "--batchnorm",
        "global",
        "--xla",
        "--no-fit-check",
        "--local-workers",
        "--mode",
        "strong",
        "--batch-size",
        "64",
        "--precision",
        "mixed_float16",
        "--window-seconds",
        "0.5",
        "--timeout",
        "60",
    ]
    listed = run_cli("scale", "mlp", "--hosts", "a:2222,b:2222", *given, "--store", "/here/only.sqlite", "--json")
    assert listed.returncode == 0, listed.stderr
    for worker in json.loads(listed.stdout)["workers"]:
        args = shlex.split(worker["command"])[1:]
        assert args[:6] == ["gpuscout", "scale", "mlp", "--worker", "--cluster", json.loads(listed.stdout)["cluster"]]
        options, flags, rest = {}, set(), args[6:]
        while rest:
            if len(rest) > 1 and not rest[1].startswith("--"):
                options[rest[0]], rest = rest[1], rest[2:]
            else:
                flags.add(rest[0]), rest.pop(0)
        assert flags == {"--xla", "--no-fit-check", "--local-workers"}
        assert options == {
            "--backend": "tensorflow",
            "--gpu-counts": "2",
            "--batchnorm": "global",
            "--mode": "strong",
            "--batch-size": "64",
            "--precision": "mixed_float16",
            "--window-seconds": "0.5",
            "--timeout": "60",
        }
        # (not --store or --hosts: this host's, not theirs)


def test_printed_host_commands_run_and_merge(tmp_path):
    listed = run_cli(
        "scale", "mlp", "--hosts", "localhost:2222,localhost:2223", "--cpu", "--gpu-counts", "1", *QUICK, "--json"
    )
    assert listed.returncode == 0, listed.stderr
    plan = json.loads(listed.stdout)
    import socket

    ports = []
    for _ in plan["workers"]:
        with socket.socket() as s:
            s.bind(("localhost", 0))
            ports.append(s.getsockname()[1])
    env = dict(cli_env(tmp_path))
    env.pop("GPUSCOUT_WORKER")
    procs = []
    for i, w in enumerate(plan["workers"]):
        config = json.loads(shlex.split(w["command"])[0].split("=", 1)[1])
        config["cluster"]["worker"] = [f"localhost:{p}" for p in ports]  # free ports on this machine
        args = shlex.split(w["command"])[2:]
        assert args[:2] == ["scale", "mlp"] and "--cpu" in args
        assert all(args[args.index(QUICK[i]) + 1] == QUICK[i + 1] for i in range(0, len(QUICK), 2))  # forwarded
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "gpuscout", *args, "--store", str(tmp_path / f"h{i}.db")],
                env={**env, "TF_CONFIG": json.dumps(config)},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    cluster = plan["cluster"]
    export = run_cli(
        "results", "export", "--group", cluster, "-o", str(tmp_path / "w1.json"), "--store", str(tmp_path / "h1.db")
    )
    assert export.returncode == 0, export.stderr
    assert run_cli("results", "import", str(tmp_path / "w1.json"), "--store", str(tmp_path / "h0.db")).returncode == 0
    merged = run_cli("scale", "--merge", cluster, "--json", "--store", str(tmp_path / "h0.db"))
    assert merged.returncode == 0, merged.stderr
    record = json.loads(merged.stdout)
    assert record["distribution"]["workers"] == 2 and record["devices"] == 2 and record["batch_size"] == 512
    with Store(tmp_path / "h1.db") as store:
        worker1 = stored(store)[0]
    assert worker1["cluster"]["index"] == 1 and worker1["group_id"] == cluster


def _two_fake_gpus(tmp_path, slow_clock=None, nvlink=True):
    gpu = {
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-0",
        "memory_total_bytes": 85899345920,
        "compute_capability": [9, 0],
        "power_limit_w": 700,
        "sm_clock_max_mhz": 1980,
        "sm_clock_mhz": 1980,
        "utilization_pct": 98,
        "power_w": 600.0,
        "temperature_c": 60,
        "memory_used_bytes": 2 * 2**30,
        "clock_event_reasons": 0,
        "processes": [],
        "nvlinks": 18,
    }
    second = {**gpu, "uuid": "GPU-1", **({"sm_clock_mhz": slow_clock} if slow_clock else {})}
    path = tmp_path / "nvml.json"
    path.write_text(json.dumps({"gpus": [gpu, second], "topology": {"nvlink": nvlink, "level": 30}}))
    return str(path)


def test_a_hung_collective_is_killed_and_named(tmp_path, store_path):
    env = cli_env(tmp_path, GPUSCOUT_FAKE_NVML=_two_fake_gpus(tmp_path), FAKE_HANG_DEVICES="2")
    result = gpuscout(
        ["scale", "mlp", "--gpu-counts", "1,2", "--backend", "jax", "--timeout", "3", "--store", str(store_path)], env
    )
    assert result.returncode == 1
    assert "the 2-device run hung and was killed by the --timeout watchdog" in result.stdout
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert all(gone(p) for p in pids)  # the child and its grandchild
    with Store(store_path) as store:
        statuses = {r["devices"]: r["status"] for r in stored(store)}
    assert statuses == {1: "ok", 2: "timeout"}


def test_fake_gpus_give_topology_per_gpu_telemetry_and_a_straggler(tmp_path, store_path):
    env = cli_env(tmp_path, GPUSCOUT_FAKE_NVML=_two_fake_gpus(tmp_path, slow_clock=1700, nvlink=False))
    result = gpuscout(
        ["scale", "resnet18_cifar", "--gpu-counts", "2", "--backend", "jax", "--json", "--store", str(store_path)], env
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["interconnect"]["kind"] == "PCIe" and "PHB" in report["interconnect"]["detail"]
    two = _points(report)[2]
    assert [g["index"] for g in two["per_gpu"]] == [0, 1] and two["per_gpu"][1]["sm_clock_mean_mhz"] == 1700
    assert "straggler" in two["flags"]
    with Store(store_path) as store:
        record = next(r for r in stored(store) if r["devices"] == 2)
    assert record["telemetry"]["power_mean_w"] == pytest.approx(1200) and record["telemetry"]["gpus"] == 2
    assert [g["uuid"] for g in record["gpus"]] == ["GPU-0", "GPU-1"]
    assert record["cost"]["hourly"]["basis"].startswith("2 GPUs x (")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--gpu-counts", "1,4"], "--gpu-counts 4 asks for more GPUs than this machine has (2 visible)"),
        (["--gpu-counts", "0,1"], "positive GPU counts"),
        (["--mode", "strong", "--batch-size", "255"], "does not divide by 2"),
        (["--mode", "sideways"], "unknown --mode"),
        (["--local-workers"], "--backend tensorflow"),
        (["--backend", "tensorflow", "--xla"], "without XLA"),
        (["--gpu-counts", "1,2", "--gpus", "0,5"], "GPU index 5 not found"),
        (["--gpus", "1,2"], "give --gpu-counts 1,2 for the counts"),
        (["--hosts", "onlyone:1"], "two or more host:port"),
        (["--worker", "--cluster", "x"], "TF_CONFIG"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, store_path, args, message):
    env = cli_env(tmp_path, GPUSCOUT_FAKE_NVML=_two_fake_gpus(tmp_path))
    env.pop("TF_CONFIG", None)
    result = gpuscout(
        ["scale", "mlp", "--backend", "jax", *args, "--store", str(store_path)]
        if "--backend" not in args
        else ["scale", "mlp", *args, "--store", str(store_path)],
        env,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not store_path.exists() or Store(store_path).count() == 0


def test_merge_of_an_unknown_cluster_exits_2(tmp_path, store_path):
    Store(store_path).close()
    result = run_cli("scale", "--merge", "nope", "--store", str(store_path))
    assert result.returncode == 2 and "no worker records of cluster 'nope'" in result.stderr
