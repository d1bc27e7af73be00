"""Which GPUs a watched command used, and their telemetry, sampled from gpuscout's process.

The command may use any GPU it can see, so every visible one is sampled from the start (the
sampler is cheap) and the process lists say afterwards which were the command's. NVML's process
list is slow on some drivers, so it is read every PROCESS_POLL_S on a thread of its own, never
in the sampling loop (telemetry/sampler.py).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from gpuscout.executor.process import process_tree
from gpuscout.record.run import GpuInfo, TelemetrySample
from gpuscout.telemetry.nvml import Nvml
from gpuscout.telemetry.sampler import Sampler

PROCESS_POLL_S = 2.0
# A GPU whose memory in use grew by this much while the command ran was used by it, when NVML's
# process list cannot tell (a container, where it shows the host's pids).
MEMORY_GROWTH_BYTES = 256 * 2**20


def visible_gpus(nvml: Nvml, env: dict[str, str]) -> list[int]:
    """NVML indices of the GPUs a process started with `env` can see (CUDA_VISIBLE_DEVICES:
    indices or UUIDs; unset: all). gpuscout runs the command with CUDA_DEVICE_ORDER as given, and
    NVML numbers by PCI bus; CUDA's default order differs only on mixed-GPU hosts."""
    if not nvml.available:
        return []
    every = list(range(nvml.count))
    wanted = env.get("CUDA_VISIBLE_DEVICES")
    if wanted is None:
        return every
    chosen = []
    for item in (part.strip() for part in wanted.split(",")):
        if item.isdigit() and int(item) in every:
            chosen.append(int(item))
        elif item.startswith(("GPU-", "MIG-")):
            chosen += [i for i in every if (nvml.gpu(i).uuid or "").startswith(item)]
        else:
            break  # CUDA stops at the first entry it cannot use ("-1", "")
    return list(dict.fromkeys(chosen))


@dataclass
class Seen:
    """What the process lists showed for one GPU."""

    before: set[int] = field(default_factory=set)  # pids on it before the command started
    during: set[int] = field(default_factory=set)  # pids listed while it ran
    memory_first_bytes: int | None = None
    memory_max_bytes: int | None = None


@dataclass
class Attribution:
    used: list[int]  # NVML indices of the GPUs the command used
    other_pids: list[int]
    note: str | None = None


def attribute(seen: dict[int, Seen], ours: set[int]) -> Attribution:
    """Which GPUs were the command's (`ours`: the pids of its process tree), and who else was on them.

    A GPU listing one of our pids is ours, and every other pid on it another job's. Where none of
    ours is ever listed (a container: NVML shows the host's pids), a GPU that gained a process
    while the command ran is ours, and the pids that were there before are others'. Failing
    that, a GPU whose memory grew by MEMORY_GROWTH_BYTES; and where NVML lists no process at all,
    every visible GPU, said in the note."""
    matched = [g for g, s in seen.items() if s.during & ours]
    if matched:
        return Attribution(matched, sorted({p for g in matched for p in seen[g].during - ours}))
    gained = [g for g, s in seen.items() if s.during - s.before]
    if gained:
        return Attribution(
            gained,
            sorted({p for g in gained for p in seen[g].during & seen[g].before}),
            note="NVML lists other pids than this process tree's (a container?): the GPUs that "
            "gained a process while it ran are taken as its",
        )
    grew = [
        g
        for g, s in seen.items()
        if s.memory_first_bytes is not None
        and s.memory_max_bytes is not None
        and s.memory_max_bytes - s.memory_first_bytes >= MEMORY_GROWTH_BYTES
    ]
    if grew:
        return Attribution(
            grew,
            [],
            note="NVML showed no process of the command: the GPUs whose memory in use "
            "grew while it ran are taken as its",
        )
    if seen and not any(s.before or s.during for s in seen.values()):
        return Attribution(
            sorted(seen),
            [],
            note="NVML lists no processes here: telemetry of every GPU the "
            "command could see, which it may not all have used",
        )
    return Attribution([], [])


class GpuWatch:
    """Samples `candidates` (NVML indices) and their process lists while a command runs."""

    def __init__(self, nvml: Nvml, candidates: list[int], interval_s: float) -> None:
        self.nvml, self.candidates, self.interval_s = nvml, candidates, interval_s
        self.seen = {g: Seen(before={p.pid for p in nvml.compute_processes(g)}) for g in candidates}
        self.ours: set[int] = set()
        self.root: int | None = None
        self._samplers = [Sampler(nvml, g, interval_s) for g in candidates]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="gpuscout-processes", daemon=True)

    def start(self, root: int) -> None:
        self.root = root
        self.ours |= {root}
        for sampler in self._samplers:
            sampler.start()
        self._thread.start()

    def _look(self) -> None:
        if self.root is not None:
            self.ours |= process_tree(self.root)
        for g in self.candidates:
            self.seen[g].during |= {p.pid for p in self.nvml.compute_processes(g)}

    def _poll(self) -> None:
        while not self._stop.wait(PROCESS_POLL_S):
            self._look()

    def latest(self) -> dict[int, TelemetrySample]:
        """Each GPU's newest sample (for a live view)."""
        return {g: s.latest() for g, s in zip(self.candidates, self._samplers) if s.latest() is not None}

    def stop(self) -> tuple[list[GpuInfo], list[list[TelemetrySample]], Attribution]:
        """The GPUs the command used (NVML's description), their samples, and how that was decided."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=10)
            self._look()
        samples = {g: sampler.stop() for g, sampler in zip(self.candidates, self._samplers)}
        for g, taken in samples.items():
            memory = [s.memory_used_bytes for s in taken if s.memory_used_bytes is not None]
            if memory:
                self.seen[g].memory_first_bytes, self.seen[g].memory_max_bytes = memory[0], max(memory)
        found = attribute(self.seen, self.ours)
        return [self.nvml.gpu(g) for g in found.used], [samples[g] for g in found.used], found
