"""The PyTorch peer of `gpuscout scale`: a model under DistributedDataParallel (NCCL), weak
scaling, timed as gpuscout times (10 warm-up steps, a calibration pass, 5 windows of >= 2 s, the
device synchronised only at window ends).

    python benchmarks/ddp_peer.py GPUS BATCH_PER_GPU fp32|bf16 [MODEL [SEQ]] [--mode eager|compiled] [--hook bf16]

MODEL: resnet50 (default: torchvision's, channels_last, cudnn.benchmark, SGD with momentum) or
gpt2_small | bert_base (benchmarks/torch_peers.py's models and data, fused AdamW, SEQ tokens:
1024 and 128 by default). Random data resident on each GPU and rotated; bf16 = autocast.
--mode compiled: the model and its loss compiled as one module, then wrapped in DDP (nanoGPT's
train.py order: DDP's bucketed all-reduces then overlap the compiled backward through
DDPOptimizer's graph splits); eager (the default) is the peer of the figures before 2026-11-25.
One process per GPU (torch.multiprocessing). Prints one line `@@peer {json}` with the global
samples/s of each window. Without CUDA it runs GPUS processes on the CPU over gloo: a smoke run
of the script itself before a GPU call (`ddp_peer.py 2 1 bf16 gpt2_small 32`: about 5 minutes
on 2 cores with torch 2.13 CPU and transformers), not a peer.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(
    rank: int, world: int, batch: int, precision: str, port: int, out, name: str, seq: int, mode: str, hook: str
) -> None:
    from torch_peers import build, loss_module  # beside this file; spawned processes import it anew

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    if cuda:
        torch.cuda.set_device(rank)
    torch.manual_seed(rank)
    torch.backends.cudnn.benchmark = True
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if name == "resnet50":
        import torchvision

        model = torchvision.models.resnet50().to(device).to(memory_format=torch.channels_last)
        data = [
            (
                torch.randn(batch, 3, 224, 224, device=device).to(memory_format=torch.channels_last),
                torch.randint(0, 1000, (batch,), device=device),
            )
            for _ in range(4)
        ]
        loss_of = lambda m, x, y: torch.nn.functional.cross_entropy(m(x), y)  # noqa: E731
        make_optimizer = lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9)  # noqa: E731
    else:  # the single-GPU peers' transformer models and data (torch_peers.py)
        model, data, loss_of, _ = build(name, batch, seq, device)
        make_optimizer = lambda params: torch.optim.AdamW(params, lr=1e-4, fused=cuda)  # noqa: E731
    opt = make_optimizer(model.parameters())
    model = torch.nn.parallel.DistributedDataParallel(
        loss_module(model, loss_of, mode), device_ids=[rank] if cuda else None
    )
    if hook == "bf16":  # gradients exchanged in bfloat16, averaged, cast back (torch's own hook)
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook

        model.register_comm_hook(None, bf16_compress_hook)
    step_count = [0]

    def step():
        x, y = data[step_count[0] % len(data)]
        step_count[0] += 1
        with torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def run(n: int) -> float:
        sync()
        dist.barrier()
        start = time.monotonic()
        for _ in range(n):
            step()
        sync()
        dist.barrier()
        return time.monotonic() - start

    run(11)  # first step + 10 warm-up steps
    estimate = run(10) / 10
    steps = torch.tensor([max(10, math.ceil(2.0 / estimate))], device=device)
    dist.all_reduce(steps, op=dist.ReduceOp.MAX)  # every rank runs the same number of steps
    rates = [world * batch * int(steps) / run(int(steps)) for _ in range(5)]
    if rank == 0:
        out.put(
            {
                "model": name,
                "seq": seq if name != "resnet50" else None,
                "gpus": world,
                "batch_per_gpu": batch,
                "precision": precision,
                "mode": mode,
                "hook": hook,
                "steps_per_window": int(steps),
                "windows_samples_per_s": rates,
                "samples_per_s": statistics.median(rates),
                "torch": torch.__version__,
                "device": device,
                "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
            }
        )
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("gpus", type=int)
    parser.add_argument("batch", type=int, help="per GPU")
    parser.add_argument("precision", choices=("fp32", "bf16"))
    parser.add_argument("name", nargs="?", default="resnet50", choices=("resnet50", "gpt2_small", "bert_base"))
    parser.add_argument("seq", nargs="?", type=int)
    parser.add_argument("--mode", default="eager", choices=("eager", "compiled"))
    parser.add_argument("--hook", default="none", choices=("none", "bf16"), help="bf16: bf16_compress_hook")
    args = parser.parse_args()
    gpus, batch, precision, name, mode = args.gpus, args.batch, args.precision, args.name, args.mode
    seq = args.seq or {"gpt2_small": 1024, "bert_base": 128}.get(name, 0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.start_processes(
        worker, args=(gpus, batch, precision, port, out, name, seq, mode, args.hook), nprocs=gpus, start_method="spawn"
    )
    print("@@peer " + json.dumps(out.get()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
