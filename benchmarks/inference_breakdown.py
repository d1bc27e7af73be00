"""Where a ResNet-50 inference request's time goes, gpuscout's JAX path against torch.compile:
the host-to-GPU copy of the input alone, the forward pass alone on a GPU-resident input, and
both (what `bench --mode inference` times). bf16, batches 64 and 256, 50 requests after 20
warm-up, medians in ms. For docs/benchmarks.md (the inference section's open question).

    python benchmarks/inference_breakdown.py
"""

from __future__ import annotations

import os
import subprocess
import sys

JAX = r"""
import json, os, statistics, time, sys
os.environ["KERAS_BACKEND"] = "jax"
import numpy as np, jax, keras
sys.path.insert(0, "src")
from gpuscout.workloads import get
keras.mixed_precision.set_global_policy("mixed_bfloat16")
model = get("resnet50").build_model(keras, None)
tv = [v.value for v in model.trainable_variables]; nv = [v.value for v in model.non_trainable_variables]
fwd = jax.jit(lambda t, n, x: model.stateless_call(t, n, x, training=False)[0])
dev = jax.local_devices()[0]
def med(fn, n=50):
    for _ in range(20): fn()
    out = []
    for _ in range(n):
        t = time.monotonic(); fn(); out.append(time.monotonic() - t)
    return statistics.median(out) * 1000
res = {}
for b in (64, 256):
    x = np.random.default_rng(0).standard_normal((b, 224, 224, 3), dtype=np.float32)
    xd = jax.device_put(x, dev).block_until_ready()
    res[b] = {"copy_ms": med(lambda: jax.device_put(x, dev).block_until_ready()),
              "forward_ms": med(lambda: fwd(tv, nv, xd).block_until_ready()),
              "both_ms": med(lambda: fwd(tv, nv, jax.device_put(x, dev)).block_until_ready())}
print("@@r " + json.dumps({"side": "gpuscout jax", "batches": res}))
"""

TORCH = r"""
import json, statistics, time
import numpy as np, torch, torchvision
torch.backends.cudnn.benchmark = True
model = torch.compile(torchvision.models.resnet50().cuda().eval().to(memory_format=torch.channels_last), dynamic=False)
def med(fn, n=50):
    for _ in range(20): fn()
    out = []
    for _ in range(n):
        t = time.monotonic(); fn(); torch.cuda.synchronize(); out.append(time.monotonic() - t)
    return statistics.median(out) * 1000
res = {}
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    for b in (64, 256):
        x = np.random.default_rng(0).standard_normal((b, 3, 224, 224), dtype=np.float32)
        to = lambda: torch.from_numpy(x).cuda().to(memory_format=torch.channels_last)
        xd = to()
        res[b] = {"copy_ms": med(to), "forward_ms": med(lambda: model(xd)), "both_ms": med(lambda: model(to()))}
print("@@r " + json.dumps({"side": "torch.compile", "batches": res, "torch": torch.__version__}))
"""


def main() -> int:
    for code in (JAX, TORCH):
        result = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=280,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        )
        line = next((printed for printed in result.stdout.splitlines() if printed.startswith("@@r ")), None)
        print(line[4:] if line else f"failed: {result.stderr[-1500:]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
