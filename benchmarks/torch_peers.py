"""Native PyTorch peers of gpuscout's transformer workloads, timed like gpuscout times them.

    python benchmarks/torch_peers.py MODEL MODE BATCH [SEQ]     MODEL: gpt2_small | bert_base | vit_b16
                                                   MODE: eager | compiled | compiled-model

Same architecture and sizes as the gpuscout workload (so the same FLOPs), bf16 autocast, fused
AdamW, random data resident on the GPU and rotated, no dropout; 10 warm-up steps, a calibration
pass, then 5 windows of >= 3 s synchronised at their ends. Prints one line `@@peer {json}`.
"compiled" compiles the model and its loss as one module (`WithLoss`), as nanoGPT's train.py
compiles a model whose forward returns the loss; "compiled-model" compiles the model only, the loss
eager: the peer of the figures in docs/benchmarks.md before 2026-11-25's "peers compile their
loss" (for GPT-2 the eager loss reads and writes its 50,304-wide float32 logits several times).
- gpt2_small: a nanoGPT-style model written here (github.com/karpathy/nanoGPT model.py: pre-norm
  blocks, fused QKV, F.scaled_dot_product_attention(is_causal=True), tanh GELU), vocabulary
  50,304, untied head like gpuscout's.
- bert_base: Hugging Face transformers' BertForMaskedLM(BertConfig()) with dropout 0 and SDPA
  attention, 15% of labels set, the rest -100.
- vit_b16: timm's vit_base_patch16_224 (no dropout by default), channels_last.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=50304, ctx=1024, d=768, layers=12, heads=12) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class WithLoss(nn.Module):
    """A model whose forward returns its training loss, so that `torch.compile` (and DDP) see the
    loss as part of the model, as in nanoGPT (model(idx, targets) -> logits, loss)."""

    def __init__(self, model: nn.Module, loss_of) -> None:
        super().__init__()
        self.model, self.loss_of = model, loss_of

    def forward(self, x, y):
        return self.loss_of(self.model, x, y)


MODES = ("eager", "compiled", "compiled-model")


def loss_module(model: nn.Module, loss_of, mode: str) -> nn.Module:
    """The module a step calls as `module(x, y) -> loss`, compiled as `mode` says (MODES)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    if mode == "compiled-model":
        return WithLoss(torch.compile(model), loss_of)
    whole = WithLoss(model, loss_of)
    return torch.compile(whole) if mode == "compiled" else whole


def build(name: str, batch: int, seq: int, device: str = "cuda"):
    """The model on `device` (the current CUDA device by default; ddp_peer.py's CPU smoke run
    passes "cpu"), four batches of random data there, the loss function and units per sample."""
    g = torch.Generator(device=device).manual_seed(0)
    if name == "gpt2_small":
        model = GPT(ctx=seq).to(device)
        data = [
            (
                torch.randint(0, 50304, (batch, seq), device=device, generator=g),
                torch.randint(0, 50304, (batch, seq), device=device, generator=g),
            )
            for _ in range(4)
        ]
        loss_of = lambda m, x, y: F.cross_entropy(m(x).float().view(-1, 50304), y.view(-1))  # noqa: E731
        units = batch * seq
    elif name == "bert_base":
        from transformers import BertConfig, BertForMaskedLM

        config = BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        model = BertForMaskedLM._from_config(config, attn_implementation="sdpa").to(device)
        data = []
        for _ in range(4):
            x = torch.randint(0, config.vocab_size, (batch, seq), device=device, generator=g)
            y = torch.randint(0, config.vocab_size, (batch, seq), device=device, generator=g)
            y[torch.rand((batch, seq), device=device, generator=g) >= 0.15] = -100
            data.append((x, y))
        loss_of = lambda m, x, y: m(input_ids=x, labels=y).loss  # noqa: E731
        units = batch * seq
    else:
        import timm

        model = timm.create_model("vit_base_patch16_224").to(device).to(memory_format=torch.channels_last)
        data = [
            (
                torch.randn(batch, 3, 224, 224, device=device, generator=g).to(memory_format=torch.channels_last),
                torch.randint(0, 1000, (batch,), device=device, generator=g),
            )
            for _ in range(4)
        ]
        loss_of = lambda m, x, y: F.cross_entropy(m(x), y)  # noqa: E731
        units = batch
    return model, data, loss_of, units


def make_step(name: str, mode: str, batch: int, seq: int):
    """One training step of the peer (bf16 autocast, fused AdamW, compiled as `mode` says: MODES):
    step(i) runs batch i % 4 and returns the loss; and units per step."""
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    model, data, loss_of, units = build(name, batch, seq)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    with_loss = loss_module(model, loss_of, mode)

    def step(i):
        x, y = data[i % len(data)]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = with_loss(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step, units


def main() -> int:
    name, mode, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
    seq = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    step, units = make_step(name, mode, batch, seq)

    t0 = time.monotonic()
    step(0)
    torch.cuda.synchronize()
    first = time.monotonic() - t0
    for i in range(10):
        step(i)
    torch.cuda.synchronize()
    t0 = time.monotonic()
    for i in range(10):
        step(i)
    torch.cuda.synchronize()
    steps = max(10, math.ceil(3.0 / ((time.monotonic() - t0) / 10)))
    windows = []
    for _ in range(5):
        t0 = time.monotonic()
        for i in range(steps):
            loss = step(i)
        float(loss)
        windows.append(steps * units / (time.monotonic() - t0))
    print(
        "@@peer "
        + json.dumps(
            {
                "model": name,
                "mode": mode,
                "batch": batch,
                "seq": seq,
                "windows": windows,
                "median": statistics.median(windows),
                "first_step_s": first,
                "peak_memory_bytes": torch.cuda.max_memory_allocated(),
                "torch": torch.__version__,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
