"""`gputop plan`: how much GPU memory a training or inference job needs, before launching it.

The estimate follows the formula of docs/diagnostics.md §7.2:

    model states  = trainable·(weight + grad + optimizer bytes) + frozen·weight bytes  [÷ ZeRO]
    activations   = L·c·dtype·b·s·h   (checkpointed: L·dtype·b·s·h + one layer, c·dtype·b·s·h)
                  + 4·b·s·V           (fp32 logits)
    total per GPU = model states + activations + KV cache + CUDA context + allocator overhead

Sizes are in GB (10⁹ bytes), as model sizes and published figures are quoted.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

GB = 1e9
GIB = float(1 << 30)
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "int8": 1.0, "int4": 0.5}
# 4-bit weights also store one scale per block: NF4 with double quantization costs 0.127 extra
# bits per parameter (QLoRA paper, §3); GPTQ/AWQ group-128 scales are close to that.
QUANT_SCALE_BYTES = {"int8": 0.0, "int4": 0.127 / 8}
OPTIMIZERS = ("adamw", "adam", "sgd", "adam8bit", "none")
QLORA_RANK = 64  # the QLoRA paper's setting: r=64 on every linear layer
# Hidden-state copies kept per layer for backward, in units of dtype·b·s·h. ml-engineering
# measured 24-48 (Llama-3.1-8B: 28); we use the Llama figure since shapes are Llama-like.
ACTIVATION_COPIES = 28
CUDA_CONTEXT = 0.75 * GIB  # NVML per-process minus reserved: 0.60-0.75 GiB measured (H100, CUDA 13)
# reserved - allocated at the step peak was 14-18 % of activation memory with the default
# allocator, 9 % with expandable segments (184M transformer, docs/diagnostics.md §4.2); the
# persistent model states, allocated once, fragment little.
ALLOCATOR_OVERHEAD = 0.15
COMMON_SIZES_GB = (16, 24, 32, 40, 48, 80, 96, 141, 192)  # marketed GPU memory sizes
# A card sold as "80 GB" reports 79.6 GiB to NVML, and the driver keeps some of that.
USABLE_PER_MARKETED_GB = 0.97 * GIB
TIGHT = 0.85  # "nearly full" in the fragmentation rule (R4): one size up OOM-ed from there


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    vocab: int
    heads: int
    kv_heads: int
    ffn: int
    source: str  # "given", or the reference model it was taken from

    @property
    def embedding_params(self) -> float:
        """Input embedding and LM head (untied): what stays unquantized in int8/int4."""
        return 2.0 * self.vocab * self.hidden


# Llama-family shapes, for when only --params is given: (params, hidden, layers, vocab, heads,
# kv heads, ffn), from the models' published configs.
REFERENCE_SHAPES = {
    "Llama-3.2-1B": (1.24e9, 2048, 16, 128256, 32, 8, 8192),
    "Llama-3.2-3B": (3.21e9, 3072, 28, 128256, 24, 8, 8192),
    "Llama-2-7B": (6.74e9, 4096, 32, 32000, 32, 32, 11008),
    "Llama-3.1-8B": (8.03e9, 4096, 32, 128256, 32, 8, 14336),
    "Llama-2-13B": (13.0e9, 5120, 40, 32000, 40, 40, 13824),
    "Llama-3.1-70B": (70.6e9, 8192, 80, 128256, 64, 8, 28672),
    "Llama-3.1-405B": (405.9e9, 16384, 126, 128256, 128, 8, 53248),
}
NEAR = 1.35  # a reference model within this factor of the size is used as is


@dataclass(frozen=True)
class Job:
    params: float
    shape: Shape
    dtype: str = "bf16"
    optimizer: str = "adamw"
    mode: str = "train"
    batch: int = 1
    seq: int = 2048
    grad_checkpointing: bool = False
    lora_rank: int | None = None
    qlora: bool = False
    pure: bool = False  # no fp32 master copy; optimizer states in --dtype
    zero: int = 0
    gpus: int = 1
    kv_cache: bool = False


@dataclass(frozen=True)
class Part:
    name: str
    bytes: float
    how: str  # the arithmetic, in words


@dataclass(frozen=True)
class Estimate:
    job: Job
    parts: tuple[Part, ...]
    trainable: float
    notes: tuple[str, ...]

    @property
    def total(self) -> float:
        return sum(p.bytes for p in self.parts)

    def part(self, name: str) -> float:
        return sum(p.bytes for p in self.parts if p.name == name)


class PlanError(ValueError):
    """A combination of options that describes no real job."""


# ----------------------------------------------------------------------------------------------
# inputs


def parse_params(text: str) -> float:
    """'8B', '7e9', '184M', '1.5T', '350k' -> a parameter count."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmbgt]?)\s*", text.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"not a parameter count: {text!r} (e.g. 8B, 7e9, 184M)")
    scale = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}[m.group(2)]
    value = float(m.group(1)) * scale
    if not 1e3 <= value <= 1e14:
        raise argparse.ArgumentTypeError(f"{text!r} is not a plausible parameter count")
    return value


def infer_shape(params: float, *, hidden: int | None = None, layers: int | None = None,
                vocab: int | None = None, heads: int | None = None,
                kv_heads: int | None = None) -> Shape:
    """A Llama-like shape for `params`; options given explicitly win."""
    name, ref = min(REFERENCE_SHAPES.items(), key=lambda kv: abs(math.log(params / kv[1][0])))
    if max(params, ref[0]) / min(params, ref[0]) <= NEAR:
        _, h, n_layers, v, n_heads, n_kv, ffn = ref
        source = f"{name} (Llama-like, assumed)"
    else:
        h, n_layers, v, n_heads, n_kv, ffn = _scaled_shape(params)
        source = f"a Llama-like model of {params / 1e9:.3g}B (assumed)"
    given = [hidden, layers, vocab, heads, kv_heads]
    if all(x is not None for x in given[:3]):
        source = "given"
    elif any(x is not None for x in given):
        source = f"given where set, else {source}"
    if hidden is not None and hidden != h:  # width changes heads (of 128) and FFN with it
        ffn = round(ffn * hidden / h)
        n_heads = max(1, hidden // 128)
        h = hidden
    n_heads = heads or n_heads
    n_kv = kv_heads or (n_kv if n_heads % n_kv == 0 else n_heads)
    return Shape(h, layers or n_layers, vocab or v, n_heads, n_kv, ffn, source)


def _scaled_shape(params: float) -> tuple[int, int, int, int, int, int]:
    """Depth and width as Llama scales them (hidden ≈ 128·layers, FFN 8/3·hidden, 32k vocab):
    the layer count whose parameter count 12·L·h² + 2·V·h comes closest."""
    vocab = 32000

    def size(n_layers: int) -> float:
        h = 128 * n_layers
        return 12.0 * n_layers * h * h + 2.0 * vocab * h

    n_layers = min(range(1, 257), key=lambda n: abs(math.log(params / size(n))))
    h = 128 * n_layers
    ffn = math.ceil(8 * h / 3 / 256) * 256
    return h, n_layers, vocab, n_layers, n_layers, ffn


def check(job: Job) -> None:
    if job.mode == "infer" and (job.lora_rank or job.qlora or job.zero or job.grad_checkpointing):
        raise PlanError("--lora, --qlora, --zero and --grad-checkpointing are for --mode train")
    if job.kv_cache and job.mode != "infer":
        raise PlanError("--kv-cache is for --mode infer")
    if (job.mode == "train" and job.dtype in QUANT_SCALE_BYTES and not job.lora_rank
            and not job.qlora):
        raise PlanError(f"{job.dtype} weights cannot be trained directly: use --lora or --qlora")
    if job.zero and job.gpus < 2:
        raise PlanError("--zero shards states across GPUs: give --gpus N (N ≥ 2)")
    if job.shape.kv_heads > job.shape.heads:
        raise PlanError("--kv-heads cannot exceed --heads")


# ----------------------------------------------------------------------------------------------
# the estimate


def estimate(job: Job) -> Estimate:
    check(job)
    notes: list[str] = []
    if job.mode == "train":
        parts, trainable = _train_states(job, notes)
        parts.append(_activations_train(job))
    else:
        parts, trainable = [_weights(job, job.params)], 0.0
        parts.append(_activations_infer(job))
        if job.kv_cache:
            parts.append(_kv_cache(job))
    transient = sum(p.bytes for p in parts if p.name in ("activations", "KV cache"))
    parts.append(Part("CUDA context", CUDA_CONTEXT, "0.75 GiB outside the allocator (measured)"))
    parts.append(Part("allocator overhead", ALLOCATOR_OVERHEAD * transient,
                      f"{ALLOCATOR_OVERHEAD:.0%} of activations + KV cache: cached, unallocated"))
    if job.gpus > 1:
        notes.append("not counted: NCCL buffers (grow with the number of GPUs)")
    if job.zero == 3:
        notes.append("ZeRO-3 also gathers each layer's full weights while it runs (not counted)")
    return Estimate(job, tuple(parts), trainable, tuple(notes))


def _train_states(job: Job, notes: list[str]) -> tuple[list[Part], float]:
    """Weights, gradients and optimizer states (bytes per GPU) and the trainable count."""
    dt = DTYPE_BYTES[job.dtype]
    adapter = job.lora_rank or (QLORA_RANK if job.qlora else None)
    if adapter is not None:
        trainable = lora_params(job.shape, adapter)
        # Adapters train in fp32 (PEFT's default upcast) unless everything is pure low precision.
        w = g = dt if job.pure else 4.0
        master = 0.0
        weights = _weights(job, job.params, extra=trainable * w)
        notes.append(f"LoRA rank {adapter} on every linear layer of every block "
                     f"({trainable / 1e6:.1f}M trainable parameters)")
    else:
        trainable = job.params
        w = g = dt
        # Mixed precision keeps an fp32 master copy in the optimizer (ZeRO paper's K=12 for Adam).
        master = 4.0 if dt < 4 and not job.pure and job.optimizer != "none" else 0.0
        weights = Part("weights", trainable * w, f"{_n(trainable)} x {w:g} B ({job.dtype})")
    opt_bytes = master + _optimizer_bytes(job.optimizer, dt if job.pure else 4.0)
    grads = Part("gradients", trainable * g, f"{_n(trainable)} x {g:g} B")
    optim = Part("optimizer states", trainable * opt_bytes,
                 f"{_n(trainable)} x {opt_bytes:g} B ({_optimizer_words(job, master)})")
    parts = [_shard(weights, job, 3), _shard(grads, job, 2), _shard(optim, job, 1)]
    return parts, trainable


def _optimizer_bytes(optimizer: str, state_bytes: float) -> float:
    return {"adamw": 2 * state_bytes, "adam": 2 * state_bytes, "sgd": state_bytes,
            "adam8bit": 2.0, "none": 0.0}[optimizer]


def _optimizer_words(job: Job, master: float) -> str:
    states = {"adamw": "m + v", "adam": "m + v", "sgd": "momentum", "adam8bit": "8-bit m + v",
              "none": "none"}[job.optimizer]
    width = "" if job.optimizer == "adam8bit" else job.dtype if job.pure else "fp32"
    words = f"{width} {states}".strip()
    return f"fp32 master + {words}" if master else words


def _shard(part: Part, job: Job, stage: int) -> Part:
    """ZeRO stage ≥ `stage` divides this part across the GPUs."""
    if job.zero >= stage:
        return Part(part.name, part.bytes / job.gpus, f"{part.how} ÷ {job.gpus} GPUs (ZeRO)")
    return part


def _weights(job: Job, frozen: float, extra: float = 0.0) -> Part:
    """Frozen weights: quantized block matrices (int8/int4/QLoRA's NF4) with 16-bit embeddings
    and LM head, as bitsandbytes, GPTQ and AWQ leave them; else everything in --dtype."""
    quant = "int4" if job.qlora else job.dtype
    if quant in QUANT_SCALE_BYTES:
        embed = min(job.shape.embedding_params, frozen / 2)
        per = DTYPE_BYTES[quant] + QUANT_SCALE_BYTES[quant]
        size = (frozen - embed) * per + embed * 2.0 + extra
        how = (f"{_n(frozen - embed)} x {per:.3g} B ({'NF4' if job.qlora else quant}) "
               f"+ {_n(embed)} embeddings x 2 B")
    else:
        dt = DTYPE_BYTES[job.dtype]
        size = frozen * dt + extra
        how = f"{_n(frozen)} x {dt:g} B ({job.dtype})"
    if extra:
        how += f" + adapters {extra / GB:.2f} GB"
    return Part("weights", size, how)


def lora_params(shape: Shape, rank: int) -> float:
    """LoRA A and B on q, k, v, o, gate, up and down of every block: rank·(in + out) each."""
    h, f = shape.hidden, shape.ffn
    kv = h * shape.kv_heads // shape.heads
    per_layer = (h + h) * 2 + (h + kv) * 2 + (h + f) * 2 + (f + h)
    return float(rank * per_layer * shape.layers)


def _act_bytes(job: Job) -> float:
    """Activations are kept in the compute dtype: fp32, else bf16/fp16 (int weights compute in
    bf16)."""
    return 4.0 if job.dtype == "fp32" else 2.0


def _activations_train(job: Job) -> Part:
    s, dt, tokens = job.shape, _act_bytes(job), job.batch * job.seq
    per_token = dt * s.hidden
    if job.grad_checkpointing:
        kept = (s.layers + ACTIVATION_COPIES) * per_token * tokens
        how = (f"checkpoints {s.layers} layers x {dt:g} B x {tokens} tokens x {s.hidden} "
               f"+ one layer recomputed ({ACTIVATION_COPIES} copies)")
    else:
        kept = s.layers * ACTIVATION_COPIES * per_token * tokens
        how = f"{s.layers} layers x {ACTIVATION_COPIES} x {dt:g} B x {tokens} tokens x {s.hidden}"
    logits = 4.0 * tokens * s.vocab
    return Part("activations", kept + logits, f"{how} + fp32 logits {logits / GB:.2f} GB")


def _activations_infer(job: Job) -> Part:
    """No activations are kept for backward: the peak is one layer's working set (hidden
    copies and the MLP's gate/up/product) over the prompt, plus last-position logits."""
    s, dt, tokens = job.shape, _act_bytes(job), job.batch * job.seq
    working = (4 * s.hidden + 3 * s.ffn) * dt * tokens
    logits = 4.0 * job.batch * s.vocab
    return Part("activations", working + logits,
                f"one layer's working set over {tokens} prompt tokens + last-position logits")


def _kv_cache(job: Job) -> Part:
    s, dt = job.shape, _act_bytes(job)
    head_dim = s.hidden / s.heads
    size = 2.0 * s.layers * s.kv_heads * head_dim * job.batch * job.seq * dt
    return Part("KV cache", size, f"2 x {s.layers} layers x {s.kv_heads} KV heads x "
                                  f"{head_dim:g} x {job.batch * job.seq} tokens x {dt:g} B")


def _n(count: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if count >= scale:
            return f"{count / scale:.3g}{unit}"
    return f"{count:.0f}"


# ----------------------------------------------------------------------------------------------
# where it fits


@dataclass(frozen=True)
class Fit:
    name: str
    total: int  # bytes
    fits: bool
    used: float  # share of the GPU's memory the job would take


def fits(need: float, gpus: Sequence[tuple[str, int]]) -> list[Fit]:
    return [Fit(name, total, need <= total, need / total) for name, total in gpus if total > 0]




# ----------------------------------------------------------------------------------------------
# output


def describe(job: Job) -> str:
    if job.mode == "infer":
        what = f"inference, {job.dtype} weights"
    elif job.qlora or job.lora_rank:
        what = f"{'QLoRA' if job.qlora else 'LoRA'} fine-tune, {job.dtype} compute"
    elif job.pure:
        what = f"training in pure {job.dtype} (no fp32 master copy)"
    elif DTYPE_BYTES[job.dtype] < 4:
        what = f"mixed-precision training, {job.dtype} weights with fp32 master"
    else:
        what = "training in fp32"
    if job.mode == "train":
        what += f", {job.optimizer}"
        what += ", gradient checkpointing" if job.grad_checkpointing else ""
        what += f", ZeRO-{job.zero} on {job.gpus} GPUs" if job.zero else ""
    return f"{_n(job.params)} parameters, {what}; batch {job.batch} x seq {job.seq}"


def render(est: Estimate, gpus: list[Fit] | None) -> str:
    job, s = est.job, est.job.shape
    lines = [f"gputop plan: {describe(job)}",
             f"shape: hidden {s.hidden}, {s.layers} layers, vocab {s.vocab}, {s.heads} heads "
             f"({s.kv_heads} KV), FFN {s.ffn}: {s.source}"]
    if "assumed" in s.source:
        lines.append("       (set --hidden, --layers and --vocab for your model's real shape)")
    lines.append("")
    for p in est.parts:
        lines.append(f"  {p.name:<19} {p.bytes / GB:8.1f} GB   {p.how}")
    lines.append(f"  {'total per GPU':<19} {est.total / GB:8.1f} GB   "
                 f"({est.total / GIB:.1f} GiB)")
    lines += [f"  note: {n}" for n in est.notes]
    lines.append("")
    lines += _fit_lines(est.total, gpus)
    return "\n".join(lines) + "\n"


def _fit_lines(need: float, gpus: list[Fit] | None) -> list[str]:
    smallest = next((g for g in COMMON_SIZES_GB if need <= g * USABLE_PER_MARKETED_GB), None)
    out = [f"smallest common GPU size that fits: {smallest} GB" if smallest else
           f"larger than any single GPU ({COMMON_SIZES_GB[-1]} GB): shard with --zero 3 "
           "--gpus N, or use --lora/--qlora, --grad-checkpointing"]
    if not gpus:
        return [*out, "no local GPU"]
    out.append("local GPUs:")
    for g in gpus:
        if not g.fits:
            verdict = f"does not fit (needs {need / GIB:.1f} GiB)"
        elif g.used > TIGHT:
            verdict = f"fits, but tight ({g.used:.0%} of its memory)"
        else:
            verdict = f"fits ({g.used:.0%} of its memory)"
        out.append(f"  {g.name}, {g.total / GIB:.1f} GiB: {verdict}")
    return out


def to_json(est: Estimate, gpus: list[Fit] | None) -> dict[str, Any]:
    job = asdict(est.job)
    shape = job.pop("shape")
    return {
        "job": job,
        "shape": shape,
        "parts": {p.name: round(p.bytes) for p in est.parts},
        "total_bytes": round(est.total),
        "trainable_params": round(est.trainable),
        "notes": list(est.notes),
        "gpus": None if gpus is None else [asdict(g) for g in gpus],
    }
