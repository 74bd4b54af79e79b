"""`gputop plan`: how much GPU memory a training or inference job needs, before launching it, and
on which of this machine's GPUs it fits (the estimate is gputop.plan)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from gputop.commands.args import positive_int
from gputop.errors import GputopError
from gputop.plan import (
    DTYPE_BYTES,
    OPTIMIZERS,
    QLORA_RANK,
    Estimate,
    Job,
    PlanError,
    estimate,
    fits,
    infer_shape,
    parse_params,
    render,
    to_json,
)
from gputop.safetext import printable


def local_gpus(lib: Any = None) -> list[tuple[str, int]]:
    """(name, memory total in bytes) of this machine's NVIDIA GPUs, or [] if there are none."""
    from gputop.sources.nvml import NvmlSource  # the NVML binding only when a plan asks

    source = NvmlSource(lib, pcie_throughput=False)
    try:
        source.open()
        tick = source.poll(time.time())
    except GputopError:
        return []
    finally:
        source.close()
    return [(f"GPU{d.index} {printable(d.name)}", d.mem_total) for d in tick.devices
            if isinstance(d.mem_total, int)]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gputop plan",
        description="Estimate the GPU memory a training or inference job needs, and where it "
                    "fits.",
        epilog="Without --hidden/--layers/--vocab the shape of a Llama-like model of that size "
               "is assumed. Figures are estimates: check them against the probe's peaks on a "
               "real run.")
    p.add_argument("--params", type=parse_params, required=True, metavar="N",
                   help="parameter count: 8B, 7e9, 184M")
    p.add_argument("--dtype", choices=list(DTYPE_BYTES), default="bf16",
                   help="weight dtype (default bf16); with --qlora, the compute dtype")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw",
                   help="optimizer whose states are held (default adamw: fp32 m and v)")
    p.add_argument("--mode", choices=("train", "infer"), default="train",
                   help="train (weights, gradients, optimizer, activations) or infer "
                        "(default train)")
    p.add_argument("--batch", type=positive_int, default=1, help="per-GPU micro-batch")
    p.add_argument("--seq", type=positive_int, default=2048, help="sequence length in tokens")
    p.add_argument("--hidden", type=positive_int, help="model width (hidden size)")
    p.add_argument("--layers", type=positive_int, help="transformer layers")
    p.add_argument("--vocab", type=positive_int, help="vocabulary size (the logits' width)")
    p.add_argument("--heads", type=positive_int, help="attention heads")
    p.add_argument("--kv-heads", type=positive_int,
                   help="key/value heads (fewer than --heads with grouped-query attention)")
    p.add_argument("--grad-checkpointing", action="store_true",
                   help="keep one activation per layer and recompute the rest")
    p.add_argument("--lora", type=positive_int, metavar="RANK", help="LoRA with this rank")
    p.add_argument("--qlora", action="store_true",
                   help=f"4-bit NF4 base with LoRA adapters (rank from --lora, default "
                        f"{QLORA_RANK} as in the QLoRA paper)")
    p.add_argument("--pure", action="store_true",
                   help="pure low precision: no fp32 master copy, optimizer states in --dtype")
    p.add_argument("--zero", type=int, choices=range(4), default=0, help="ZeRO stage 0-3")
    p.add_argument("--gpus", type=positive_int, default=1, help="data-parallel GPUs")
    p.add_argument("--kv-cache", action="store_true",
                   help="inference: count the KV cache for batch x seq tokens")
    p.add_argument("--json", action="store_true", help="print the estimate as JSON")
    return p


def estimate_for(argv: list[str]) -> Estimate:
    """The estimate for command-line options (raises PlanError, or SystemExit on bad options)."""
    return estimate(job_from_args(build_parser().parse_args(argv)))


def job_from_args(args: argparse.Namespace) -> Job:
    shape = infer_shape(args.params, hidden=args.hidden, layers=args.layers, vocab=args.vocab,
                        heads=args.heads, kv_heads=args.kv_heads)
    return Job(params=args.params, shape=shape, dtype=args.dtype, optimizer=args.optimizer,
               mode=args.mode, batch=args.batch, seq=args.seq,
               grad_checkpointing=args.grad_checkpointing, lora_rank=args.lora,
               qlora=args.qlora, pure=args.pure, zero=args.zero, gpus=args.gpus,
               kv_cache=args.kv_cache)


def main(argv: list[str], *, gpu_totals: Sequence[int] | None = None,
         out: TextIO | None = None) -> int:
    """`gpu_totals` (bytes per GPU) stands in for the local GPUs; else NVML is asked."""
    out = out or sys.stdout
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        est = estimate(job_from_args(args))
    except PlanError as e:
        parser.error(str(e))
    named = (local_gpus() if gpu_totals is None else
             [(f"GPU{i}", int(t)) for i, t in enumerate(gpu_totals)])
    gpus = fits(est.total, named) if named else None
    if args.json:
        json.dump(to_json(est, gpus), out, indent=2)
        out.write("\n")
    else:
        out.write(render(est, gpus))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
