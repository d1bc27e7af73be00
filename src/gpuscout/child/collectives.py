"""What a compiled data-parallel step sends between devices, read from XLA's optimised program
(child side; standard library only).

`Compiled.as_text()` of a jitted step is its HLO after XLA's passes, in schedule order (the module
says `is_scheduled=true`): the gradient all-reduces as XLA combined them, NCCL's asynchronous ones
as a `-start` and a `-done` with the kernels XLA placed between them (what they can overlap), and
XLA's own Triton all-reduce kernels as fusions of kind `__triton_collective`. On two H100s (jax
0.11.2) GPT-2 small's step held 15 asynchronous all-reduces, 13 of them beside backward-pass
kernels, and ResNet-50's 27 Triton ones with nothing beside them (docs/benchmarks.md, "What two
GPUs add"): the settings alone do not say that.
"""

from __future__ import annotations

import re

# Bytes of an element of each HLO type (xla/xla_data.proto's PrimitiveType).
DTYPE_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "s64": 8, "f64": 8, "pred": 1, "s8": 1, "u8": 1}
COLLECTIVE = re.compile(
    r"\b(all-reduce-start|all-reduce|all-gather-start|all-gather|reduce-scatter|"
    r"collective-permute-start|collective-permute|all-to-all)\("
)
TRITON_COLLECTIVE = '"kind":"__triton_collective"'
TRITON_FUSION = re.compile(r" (fusion-start|fusion)\(")
KERNEL = re.compile(r" (fusion|custom-call|convolution|dot)\(")  # work XLA launches as kernels


def shape_bytes(shapes: str) -> int:
    """Bytes of every array shape in an HLO result type like '(f32[64,3]{1,0}, bf16[7])'."""
    total = 0
    for dtype, dims in re.findall(r"\b([a-z]+\d*)\[([\d,]*)\]", shapes):
        count = 1
        for d in filter(None, dims.split(",")):
            count *= int(d)
        total += count * DTYPE_BYTES.get(dtype, 4)
    return total


def collectives(hlo: str) -> tuple[list[dict], int]:
    """The collectives of the entry computation in schedule order, and its instruction count.
    Each: name, op, position, bytes (its payload), operands, done_position (asynchronous ones) and
    compute_between: the kernels XLA scheduled between its start and its end (0: it overlaps none)."""
    entry = hlo[hlo.find("\nENTRY ") :] if "\nENTRY " in hlo else hlo
    body = entry[: entry.find("\n}\n")] if "\n}\n" in entry else entry
    found, position, started = [], 0, {}
    for line in body.splitlines()[1:]:
        if " = " not in line:
            continue
        position += 1
        name, rhs = (part.strip() for part in line.split(" = ", 1))
        name = name.replace("ROOT ", "").lstrip("%")
        if "-done(" in rhs:  # an asynchronous collective ends here
            operand = re.search(r"-done\([^%]*%([\w.\-]+)", rhs)
            if operand and operand.group(1) in started:
                started.pop(operand.group(1))["done_position"] = position
            continue
        for pending in started.values():
            pending["compute_between"] += bool(KERNEL.search(rhs))
        m = COLLECTIVE.search(rhs)
        triton = TRITON_COLLECTIVE in rhs and TRITON_FUSION.search(rhs)
        if not (m or triton):
            continue
        if m:
            op, result = m.group(1), rhs[: m.start(1)]
        else:
            op = "triton all-reduce" + ("-start" if triton.group(1) == "fusion-start" else "")
            result = rhs[: triton.start()]
        size, operands = shape_bytes(result), len(re.findall(r"\b[a-z]+\d*\[", result))
        if op.endswith("all-reduce-start"):  # ((operands), results): the results alias the operands
            size, operands = size // 2, operands // 2
        item = {
            "name": name,
            "op": op,
            "position": position,
            "bytes": size,
            "operands": operands,
            "done_position": None,
            "compute_between": 0,
        }
        found.append(item)
        if op.endswith("-start"):
            started[name] = item
    return found, position


def schedule(hlo: str) -> dict:
    """The record's summary of `collectives` (record.child.CollectiveSchedule's fields)."""
    found, _ = collectives(hlo)
    beside = [c for c in found if c["compute_between"]]
    return {
        "collectives": len(found),
        "payload_bytes": sum(c["bytes"] for c in found),
        "asynchronous": sum(c["done_position"] is not None for c in found),
        "beside_compute": len(beside),
        "payload_bytes_beside_compute": sum(c["bytes"] for c in beside),
    }
