"""The PyTorch workloads that the real recordings under fixtures/nvidia were made against.

Each runs for --seconds on GPU 0 and prints one line a few seconds apart; tools/record_fixtures.sh
records each with `gputop --record` while it runs (fixtures/nvidia/README.md says how each file
was made). They need PyTorch with CUDA and use the gputop probe (docs/probe.md) where the case
is about what only the allocator or the loop knows.

    python tools/fixture_workloads.py healthy --seconds 45
    python -m gputop.probe tools/fixture_workloads.py starved --seconds 60
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from torch import nn

GiB = 1 << 30


def mlp(width: int, depth: int) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*layers).cuda().to(torch.bfloat16)


def say(*parts: object) -> None:
    print(f"[{time.strftime('%H:%M:%S')}]", *parts, flush=True)


def memory(tag: str) -> None:
    free, total = torch.cuda.mem_get_info()
    say(tag, f"allocated {torch.cuda.memory_allocated() / GiB:.1f} GiB",
        f"reserved {torch.cuda.memory_reserved() / GiB:.1f} GiB",
        f"free {free / GiB:.1f} of {total / GiB:.1f} GiB")


def train(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> None:
    loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def healthy(seconds: float) -> None:
    """A compute-bound step on data already on the GPU: the card busy, nothing wrong."""
    import gputop.probe as gp
    gp.start()
    model = mlp(8192, 8)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = [torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    end = time.monotonic() + seconds
    steps = 0
    while time.monotonic() < end:
        for x in gp.wrap(batches):
            train(model, opt, x)
            torch.cuda.synchronize()
            gp.step(batch_size=x.shape[0])
            steps += 1
        if steps % 100 < 4:
            say("healthy", steps, "steps")
    memory("healthy end")


class SlowSamples(torch.utils.data.Dataset[torch.Tensor]):
    """Each sample costs its worker ~25 ms of real CPU work (a decode and augment stand-in)."""

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, i: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(i)
        img = torch.rand(3, 256, 256, generator=g)
        for _ in range(6):
            img = torch.nn.functional.avg_pool2d(img[None], 3, 1, 1)[0] * 1.01
        return img[:, :224, :224].contiguous()


def _one_thread(_: int) -> None:
    torch.set_num_threads(1)


def starved(seconds: float) -> None:
    """Two loader workers that cannot keep up with a fast step: the GPU waits on the host.
    Run under `python -m gputop.probe` so every DataLoader loop is timed."""
    loader = torch.utils.data.DataLoader(SlowSamples(), batch_size=32, num_workers=2,
                                         worker_init_fn=_one_thread, pin_memory=True,
                                         persistent_workers=True, prefetch_factor=2)
    model = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3), nn.ReLU(), nn.Conv2d(64, 128, 3, 2, 1),
                          nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(128, 1000)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    end = time.monotonic() + seconds
    steps = 0
    while time.monotonic() < end:
        for x in loader:
            x = x.cuda(non_blocking=True)
            for _ in range(4):  # a few forward/backward passes a batch: tens of ms of GPU work
                loss = model(x).float().pow(2).mean()
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            steps += 1
            if steps % 20 == 0:
                say("starved", steps, "steps")
            if time.monotonic() >= end:
                break


def fragmented(seconds: float) -> None:
    """Variable sequence lengths with some activations kept a while (a cache of past steps):
    the caching allocator reserves far more than the job has allocated, near the card's size."""
    import gputop.probe as gp
    gp.start()
    _, total = torch.cuda.mem_get_info()
    width = 4096
    # Long-lived state, so that the reserved pool reaches well past half of the card.
    hold = torch.empty(int(total * 0.45) // 2, dtype=torch.bfloat16, device="cuda")
    model = mlp(width, 4)
    gen = torch.Generator().manual_seed(0)
    kept: list[torch.Tensor] = []
    most = int(total * 0.12) // (width * 2)  # tokens: the largest input is 12 % of the card
    end = time.monotonic() + seconds
    steps = ooms = 0
    while time.monotonic() < end:
        tokens = int(torch.randint(most // 20, most, (1,), generator=gen))
        try:
            x = torch.randn(tokens, width, device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                y = model(x)
            if steps % 3 == 0:  # a slice outlives the step, pinning its block in place
                kept.append(y[: tokens // 7].clone())
            del x, y
        except torch.OutOfMemoryError:
            ooms += 1
            say("fragmented: out of memory at", tokens, "tokens")
        if len(kept) > 6:
            kept.pop(0)
        torch.cuda.synchronize()
        gp.step(batch_size=tokens)
        steps += 1
        if steps % 25 == 0:
            memory(f"fragmented step {steps} ({ooms} out of memory)")
    del hold
    say(torch.cuda.memory_summary(abbreviated=True))


def near_oom(seconds: float) -> None:
    """A batch ramped up step by step until the peak sits near the card's size, with host work
    between steps (the GPU is not saturated): how far the batch could grow."""
    import gputop.probe as gp
    gp.start()
    layers: list[nn.Module] = []
    for _ in range(8):
        layers += [nn.Linear(1024, 1024), nn.LayerNorm(1024), nn.GELU()]
    model = nn.Sequential(*layers).cuda().to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    _, total = torch.cuda.mem_get_info()
    batch = 65536
    end = time.monotonic() + seconds
    steps = 0
    while time.monotonic() < end:
        x = torch.randn(batch, 1024, device="cuda", dtype=torch.bfloat16)
        try:
            train(model, opt, x)
            torch.cuda.synchronize()
        except torch.OutOfMemoryError:
            say("near_oom: out of memory at batch", batch)
            del x
            opt.zero_grad(set_to_none=True)
            batch = int(batch * 0.85) // 256 * 256
            continue
        del x
        gp.step(batch_size=batch)
        steps += 1
        time.sleep(0.2)  # logging, checkpoint bookkeeping: the GPU waits a little each step
        peak = torch.cuda.max_memory_reserved() / total
        if steps % 4 == 0 and peak * 1.3 < 0.93:
            batch = int(batch * 1.3) // 256 * 256
            memory(f"near_oom step {steps} next batch {batch} peak {peak * 100:.0f} %")
    memory("near_oom end")
    say(torch.cuda.memory_summary(abbreviated=True))


def leak(seconds: float) -> None:
    """A list that keeps every step's output: memory grows 2.5 GiB/s until it stops at 80 %."""
    model = mlp(4096, 2)
    _, total = torch.cuda.mem_get_info()
    kept: list[torch.Tensor] = []
    end = time.monotonic() + seconds
    ticks = 0
    while time.monotonic() < end:
        if torch.cuda.memory_reserved() < 0.8 * total:
            with torch.no_grad():
                kept.append(model(torch.randn(32768, 4096, device="cuda",
                                              dtype=torch.bfloat16)))
        time.sleep(0.1)  # 256 MiB every 0.1 s
        ticks += 1
        if ticks % 40 == 0:
            memory(f"leak {len(kept)} tensors")
    memory("leak end")


def leak_busy(seconds: float) -> None:
    """A training loop that keeps one output every 0.25 s (a loss history kept with its graph's
    tensors, say): memory grows 1 GiB/s while the GPU computes."""
    model = mlp(4096, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    _, total = torch.cuda.mem_get_info()
    kept: list[torch.Tensor] = []
    end = next_keep = time.monotonic()
    end += seconds
    while time.monotonic() < end:
        train(model, opt, x)
        torch.cuda.synchronize()
        if time.monotonic() >= next_keep and torch.cuda.memory_reserved() < 0.9 * total:
            with torch.no_grad():
                kept.append(torch.cat([model(x)] * 4))  # 256 MiB
            next_keep += 0.25
            if len(kept) % 20 == 0:
                memory(f"leak_busy {len(kept)} tensors")
    memory("leak_busy end")


def host_bound(seconds: float) -> None:
    """Batches made in the training process itself (a DataLoader with num_workers=0) for a step
    of ~20 ms on the GPU: the GPU waits while the main process decodes and augments."""
    loader = torch.utils.data.DataLoader(SlowSamples(), batch_size=16, num_workers=0)
    model = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3), nn.ReLU(), nn.Conv2d(64, 128, 3, 2, 1),
                          nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(128, 1000)).cuda()
    head = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    end = time.monotonic() + seconds
    for steps, x in enumerate(loader, 1):
        loss = model(x.cuda()).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        y = head
        for _ in range(15):  # the rest of the step: ~1.4 ms a product on an H100
            y = (y @ head).clamp_(-1, 1)
        if steps % 20 == 0:
            say("host_bound", steps, "steps, loss", f"{loss.item():.3f}", f"{float(y[0, 0]):.2f}")
        if time.monotonic() >= end:
            break


def copy_bound(seconds: float) -> None:
    """Each step copies a 2 GiB batch from pinned host memory to the GPU and back and does one
    small product with it: the copy engines are busy, the SMs nearly idle."""
    host = torch.randn(512 << 20, dtype=torch.float32).pin_memory()  # 2 GiB
    back = torch.empty_like(host).pin_memory()
    w = torch.randn(1024, 1024, device="cuda")
    end = time.monotonic() + seconds
    steps = 0
    while time.monotonic() < end:
        x = host.to("cuda", non_blocking=True)
        y = x[: 1 << 20].view(1024, 1024) @ w
        back.copy_(x, non_blocking=True)
        torch.cuda.synchronize()
        steps += 1
        if steps % 100 == 0:
            say("copy_bound", steps, "steps", f"{float(y[0, 0]):.1f}")


def copy_pageable(seconds: float) -> None:
    """Each step moves a 1 GiB batch from ordinary (pageable) host memory to the GPU, with a
    short step: the driver stages every copy through the CPU."""
    host = torch.randn(256 << 20, dtype=torch.float32)  # 1 GiB, not pinned
    w = torch.randn(4096, 4096, device="cuda")
    end = time.monotonic() + seconds
    steps = 0
    while time.monotonic() < end:
        x = host.to("cuda")
        y = x[: 4096 * 4096].view(4096, 4096) @ w
        torch.cuda.synchronize()
        steps += 1
        if steps % 20 == 0:
            say("copy_pageable", steps, "steps", f"{float(y[0, 0]):.1f}")


def healthy_eval(seconds: float) -> None:
    """healthy's step with an evaluation pass and a checkpoint of the model and optimizer every
    20 s: the GPU drops for seconds while the host saves. Nothing is wrong."""
    model = mlp(8192, 8)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = [torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    end = time.monotonic() + seconds
    pause = time.monotonic() + 20
    steps = 0
    while time.monotonic() < end:
        for x in batches:
            train(model, opt, x)
        torch.cuda.synchronize()
        steps += len(batches)
        if time.monotonic() >= pause:
            with torch.no_grad():
                for x in batches * 4:
                    model(x)
            torch.cuda.synchronize()
            say("healthy_eval: evaluated at", steps, "steps; saving")
            torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, "/tmp/ckpt.pt")
            say("healthy_eval: saved")
            pause = time.monotonic() + 20
    memory("healthy_eval end")


CASES = {"healthy": healthy, "starved": starved, "fragmented": fragmented,
         "near_oom": near_oom, "leak": leak, "leak_busy": leak_busy, "host_bound": host_bound,
         "copy_bound": copy_bound, "copy_pageable": copy_pageable, "healthy_eval": healthy_eval}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--seconds", type=float, default=45)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("fixture_workloads: CUDA is not available", file=sys.stderr)
        return 1
    CASES[args.case](args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
