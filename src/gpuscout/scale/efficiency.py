"""What a `scale` session's records mean: the scaling table against the one-GPU point (or each
GPU alone), the interconnect, and the verdict with its likely cause."""

from __future__ import annotations

from gpuscout import catalog, workloads
from gpuscout.analysis import communication, scaling
from gpuscout.analysis.compare import ratio_ci
from gpuscout.record.run import RunRecord
from gpuscout.scale.results import (
    Cause,
    EachAlone,
    Efficiency,
    Explained,
    GpuFigures,
    Interconnect,
    Point,
    ScaleReport,
    Speedup,
    Verdict,
)
from gpuscout.telemetry.nvml import TOPOLOGY_LEVELS
from gpuscout.workloads import sizing


def interconnect(links) -> Interconnect | None:
    """One line for the GPUs' links: NVLink when every pair has it, else the farthest PCIe path."""
    if not links:
        return None
    if all(link.interconnect == "NVLink" for link in links):
        counts = sorted({c for link in links for c in link.nvlinks if c is not None})
        detail = f"NVLink, {'/'.join(map(str, counts))} active links per GPU" if counts else "NVLink"
        return Interconnect(kind="NVLink", detail=detail)
    order = [name for name, _ in TOPOLOGY_LEVELS.values()]
    worst = max(
        (link for link in links if link.interconnect == "PCIe"),
        key=lambda link: order.index(link.pcie_level) if link.pcie_level in order else -1,
    )
    return Interconnect(
        kind="PCIe",
        detail=f"PCIe only: GPUs {worst.gpus[0]} and {worst.gpus[1]} meet at "
        f"{worst.pcie_path or 'an unknown level'} ({worst.pcie_level or '?'})",
    )


def analyse(
    records: dict[int, RunRecord],
    mode: str,
    links,
    device_kind: str,
    alone: dict[int, RunRecord] | None = None,
    gpu_ids: list[int] = (),
) -> ScaleReport:
    """The scaling table and the verdict from the records of each count; with `alone` (GPU -> its
    one-GPU run), each count is judged against the slowest of its GPUs alone."""
    rates = {g: (a.samples_per_s, a.window_rates()) for g, a in (alone or {}).items() if a.ok and a.samples_per_s}
    base = records.get(1)
    base_ok = base is not None and base.ok
    connection = interconnect(links)
    link = connection.kind if connection else None
    first = next(iter(records.values()))
    entry = catalog.match(first.gpu.name) if first.gpu else None
    gbs = scaling.link_gbs(link, entry.nvlink_gbs if entry else None, entry.pcie_gen if entry else None)
    largest_batch = (
        sizing.fitting_batch(
            workloads.get(first.workload), first.precision, first.seq_len, first.gpu.memory_total_bytes
        )
        if device_kind == "gpu" and first.gpu
        else None
    )
    points = []
    for n, r in sorted(records.items()):
        t = r.throughput if r.ok else None
        dist = r.distribution
        known = r.error.explanations[0] if r.error and r.error.explanations else None  # the root cause first
        point = Point(
            devices=n,
            run_id=r.id,
            status=r.status,
            message=r.error.message if r.error else None,
            explained=Explained(cause=known.cause, fix=known.fix) if known else None,
            batch_size=r.batch_size,
            per_device_batch_size=r.per_device_batch_size,
            samples_per_s=r.samples_per_s if t else None,
            ci95=[t.ci95_low / r.units_per_sample, t.ci95_high / r.units_per_sample]
            if t and t.ci95_low is not None
            else None,
            step_time_s=r.step_time_s if t else None,
            expected_efficiency=scaling.expected_efficiency(n, link),
            link=link,
            input_wait_share=r.input_wait_share,
            all_reduce=dist.all_reduce if dist else None,
            batchnorm=r.batchnorm,
            communication=communication.of(r),
            collectives=communication.as_compiled(dist.collectives if dist else None),
            per_gpu=_per_gpu(r),
            flags=[f.code for f in r.flags],
            mfu=r.mfu,
            peak_memory_bytes=r.peak_memory_bytes,
        )
        params = dist.params if dist else None
        point.allreduce_estimate_s = scaling.allreduce_s(params, n, gbs) if device_kind == "gpu" else None
        if t and base_ok:
            ratio = scaling.speedup(r.samples_per_s, base.samples_per_s)
            low, high = ratio_ci(r.window_rates(), base.window_rates()) if n > 1 else (1.0, 1.0)
            point.speedup = Speedup(ratio=ratio, ci95_low=low, ci95_high=high)
            point.efficiency = Efficiency(value=scaling.efficiency(ratio, n), ci95_low=low / n, ci95_high=high / n)
            point.outside_compute_s, point.outside_compute_share = scaling.outside_compute(
                r.step_time_s, base.step_time_s, n, mode
            )
            each = scaling.against_each_alone(r.samples_per_s, r.window_rates(), list(gpu_ids[:n]), rates, ratio_ci)
            if each:  # judged against what its GPUs do alone; outside compute from the slowest
                point.each_alone = EachAlone(**each)
                slowest = alone[point.each_alone.slowest_gpu]
                point.outside_compute_s, point.outside_compute_share = scaling.outside_compute(
                    r.step_time_s, slowest.step_time_s, n, mode
                )
        straggler = next((f.message for f in r.flags if f.code == "straggler"), None)
        situation = scaling.Situation(
            devices=n,
            mode=mode,
            device_kind=device_kind,
            efficiency=point.judged,
            status=r.status,
            data=r.data.value,
            input_wait_share=r.input_wait_share,
            straggler=straggler,
            all_reduce=point.all_reduce,
            backend=r.backend.value,
            interconnect=link,
            per_device_batch_size=r.per_device_batch_size,
            overhead_share=point.outside_compute_share,
            allreduce_estimate_s=point.allreduce_estimate_s,
            step_s=point.step_time_s,
            batchnorm_layers=dist.batchnorm_layers if dist else None,
            outside_s=point.outside_compute_s,
            batchnorm=point.batchnorm,
            largest_batch=largest_batch,
        )
        point.causes = (
            [Cause(code=c.code, message=c.message, try_=c.try_) for c in scaling.diagnose(situation)] if n > 1 else []
        )
        point.meets_expectation = None if point.judged is None else point.judged >= point.expected_efficiency
        points.append(point)
    return ScaleReport(
        mode=mode,
        backend=first.backend.value,
        precision=first.precision.value,
        data=first.data.value,
        batchnorm=next((p.batchnorm for p in points if p.batchnorm), None),
        device_kind=device_kind,
        gpu=first.gpu.name if first.gpu else None,
        interconnect=connection,
        topology=list(links),
        points=points,
        verdict=verdict(points, base_ok),
    )


def _per_gpu(record: RunRecord) -> list[GpuFigures]:
    per = record.telemetry_per_gpu or ([record.telemetry] if record.telemetry else [])
    return [
        GpuFigures(
            index=t.index,
            gpu_util_mean_pct=t.gpu_util_mean_pct,
            power_mean_w=t.power_mean_w,
            sm_clock_mean_mhz=t.sm_clock_mean_mhz,
            temperature_max_c=t.temperature_max_c,
            memory_used_max_bytes=t.memory_used_max_bytes,
        )
        for t in per
    ]


def verdict(points: list[Point], base_ok: bool) -> Verdict:
    """One sentence on the whole study, and what to try first."""
    hung = [p.devices for p in points if p.status == "timeout"]
    failed = [p for p in points if p.status not in ("ok", "timeout")]
    parts, tries = [], []
    if hung:
        parts.append(
            f"the {', '.join(map(str, hung))}-device run{'s' if len(hung) > 1 else ''} hung and "
            "{} killed by the --timeout watchdog".format("were" if len(hung) > 1 else "was")
        )
        tries.append(
            "rerun with NCCL_DEBUG=INFO to see the collective that waits; check the topology and "
            "that no other job holds the GPUs"
        )
    for p in failed:
        known = p.explained
        parts.append(
            f"the {p.devices}-device run ended {p.status}: {p.message}" + (f" ({known.cause})" if known else "")
        )
        if known and known.fix not in tries:
            tries.append(known.fix)
    if not base_ok:
        parts.append("the 1-device run did not finish, so there is no speedup to report")
        return Verdict(ok=False, summary="; ".join(parts), try_=tries)
    measured = [p for p in points if p.devices > 1 and p.efficiency is not None]
    if not measured:
        return Verdict(ok=not parts, summary="; ".join(parts) or "only the 1-device run was asked for", try_=tries)
    below = [p for p in measured if not p.meets_expectation]
    for p in measured:
        each = p.each_alone
        against = (
            ""
            if not each
            else (
                f" against GPU 0 alone, {each.value:.1%} against each GPU alone (the slowest, GPU "
                f"{each.slowest_gpu}, runs at {each.slowest_vs_first:.3f}x the first alone)"
            )
        )
        parts.append(
            f"{p.devices} devices: {p.speedup.ratio:.2f}x, {p.efficiency.value:.1%} efficiency{against} "
            f"({'meets' if p.meets_expectation else 'below'} the {p.expected_efficiency:.0%} expected"
            + (f" over {p.link})" if p.link else ")")
        )
    for p in below:
        for cause in p.causes:
            if cause.try_ not in tries:
                tries.append(cause.try_)
    likely = below[-1].causes[0].message if below and below[-1].causes else None
    summary = "; ".join(parts) + (f". Likely cause: {likely}" if likely else "")
    exchanged = next((p.communication for p in measured if p.communication), None)
    if exchanged:  # what these numbers were measured with: another setting is another study
        summary += f". Gradients: {exchanged}"
        compiled = measured[-1].collectives  # the largest count's, as its program had them
        summary += f"; {compiled} ({measured[-1].devices} devices)" if compiled else ""
    return Verdict(ok=not below and not hung and not failed, summary=summary, try_=tries)
