"""Mixed precision on a GPU with tensor cores (bf16 where it has them, else fp16 with loss
scaling), deferred where the input caps what faster arithmetic could buy."""

from __future__ import annotations

import ast

from gpuscout.analysis.device_causes import BF16_CC, FP16_CC
from gpuscout.record.watch import WatchRecord
from gpuscout.tune.change import Change, Deferred
from gpuscout.tune.changes.base import ChangeKind, FileEdits, Where, main_fit, original, site
from gpuscout.tune.source_edits import after_block, insert_after_imports, name_of

# What mixed precision buys the device's share of a step at most (bf16 against float32's TF32 tensor
# cores: about 2x on Hopper, the H100 ViT measured 1.88x), and the least whole-step gain worth a run:
# a loop waiting 94% for its input ran 0.77x with it (H100, docs/benchmarks.md), a run for nothing
PRECISION_MOST = 2.0


PRECISION_WORTH = 1.1


def precision(r: WatchRecord) -> list[Change] | Deferred | str:
    main = main_fit(r)
    cc = float(r.gpu.compute_capability) if r.gpu and r.gpu.compute_capability else None
    if r.gpu is None:
        return "no GPU: mixed precision buys nothing on a CPU"
    if main.precision_policy not in (None, "float32"):
        return f"the script sets its own policy ({main.precision_policy})"
    if cc is None or cc < FP16_CC:
        return f"the GPU has no tensor cores for fp16/bf16 (compute capability {r.gpu.compute_capability or '?'})"
    policy = "mixed_bfloat16" if cc >= BF16_CC else "mixed_float16"
    change = Change(
        "mixed_precision",
        "mixed_precision",
        {"mixed_precision": policy},
        f"keras.mixed_precision.set_global_policy('{policy}')   # before building the model",
        f"float32 on a GPU with {'bf16' if cc >= BF16_CC else 'fp16'} tensor cores (compute capability "
        f"{r.gpu.compute_capability})",
    )
    wait = r.input_wait_share or 0
    most = 1 / (1 - (1 - wait) * (1 - 1 / PRECISION_MOST))
    if most < PRECISION_WORTH:
        return Deferred(
            [change],
            f"the loop waits for input {wait:.0%} of the time: faster arithmetic could buy at most {most:.2f}x "
            "on its own; measured only with a change to the input (on top of one kept, or beside one)",
        )
    return [change]


class MixedPrecision(ChangeKind):
    name = "mixed_precision"
    listed = 10
    rule = "float32 on a GPU with tensor cores (compute capability 7.0 or more)"
    # what tensor cores buy grows with the work of a step: a compiled step, a larger batch
    depends_on = ("jit_compile", "batch_size", "device_batches")
    tensor_cores = True

    def plan(self, baseline: WatchRecord, script_batch: int | None) -> list[Change] | Deferred | str:
        return precision(baseline)

    def edits(self, change: Change, where: Where) -> FileEdits:
        """The global policy set after the imports, or after the script's own policy (which would
        set float32 again) and the block it is in: a policy the script sets only under a
        condition (`if debug:`) is not tune's."""
        path, _ = site(where.sites, "compile", where.root, "compiled the model")
        text = original(path, where.originals)
        line = f"keras.mixed_precision.set_global_policy({change.settings[self.name]!r})  # before the model is built"
        own = [
            n
            for n in ast.walk(ast.parse(text))
            if isinstance(n, ast.Call) and name_of(n.func) in ("set_global_policy", "set_dtype_policy")
        ]
        if own:
            return [(path, after_block(text, max(own, key=lambda n: n.lineno), line))]
        return [(path, insert_after_imports(text, line, need_keras=True))]


KIND = MixedPrecision()
