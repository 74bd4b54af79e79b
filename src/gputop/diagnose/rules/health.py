"""R8 health rules: a lost GPU, Xid errors, memory errors, a degraded PCIe or NVLink link
(docs/diagnostics.md §8 R8).

Cheap checks of counters and flags with high value: most of them need a reset, a reboot or a
hardware ticket, and the message says which.
"""

from __future__ import annotations

from collections.abc import Sequence

from gputop.diagnose.types import SEVERITIES, Condition, Diagnostic
from gputop.diagnose.window import (
    column,
    device_at,
    field_readings,
    field_values,
    growth,
    last,
    number,
    present,
)
from gputop.model import DeviceSample, LinkSample, Missing, Snapshot
from gputop.model.xid import lookup

COUNTER_WINDOW_S = 300.0  # error counters are compared over 5 min, so a slow trickle stays open
LOAD_WINDOW_S = 60.0
PCIE_LOAD = 50.0  # R8 pcie.downtrained: under load (util >= 50 %) ...
# ... at every loaded tick of the last minute, from one on. A link trains up within milliseconds
# of traffic, so one tick under load below its max is a verdict (an idle link downshifts: real
# idle dumps read Gen1 of Gen4, and x8 of x16, which the load gate keeps quiet). R8's 5 min hold
# would leave a pasted `nvidia-smi -q` without one.
PCIE_MIN_LOADED_TICKS = 1
PCIE_REPLAYS_PER_MIN = 100.0  # R8: initial guess, to tune on fleet data
REPLAY_MIN_S = 60.0
NVLINK_COUNTERS = ("crc_flit", "crc_data", "replay", "recovery")
XID_QUIET_S = 600.0  # an Xid finding opens at once and closes after 10 min without a new Xid

RESET_FIX = "Drain the node's jobs from this GPU and reset it (nvidia-smi -r) or reboot."


def check_lost(window: Sequence[Snapshot]) -> list[Condition]:
    out = []
    for d in window[-1].devices if window else ():
        if not _lost(d):
            continue
        since = d.lost.since if isinstance(d.lost, Missing) else None
        out.append(Condition(
            id="gpu.lost", severity="critical", device=d.index,
            title=f"GPU{d.index} ({d.pci_bus_id}) fell off the bus",
            cause="The driver reports the GPU as lost; no call to it succeeds.",
            fix="Reset or reboot the node; if it happens again, check the GPU's power and seating "
                "and open a hardware ticket.",
            evidence={"lost_since": since} if since is not None else {}))
    return out


def _lost(d: DeviceSample) -> bool:
    if d.lost is not None:
        return True
    return isinstance(d.util_gpu, Missing) and d.util_gpu.reason == "gpu_lost"


def check_xid(window: Sequence[Snapshot]) -> list[Condition]:
    """The Xids a GPU reported in the last XID_QUIET_S, named by the worst of them (severity from
    NVIDIA's Xid catalog, gputop.model.xid). A lost GPU keeps its Xids: Xid 79 is why it is lost."""
    if not window:
        return []
    now = window[-1].time
    out = []
    for d in window[-1].devices:
        recent = [x for x in d.xids if x.time > now - XID_QUIET_S]
        if not recent:
            continue
        worst = max(recent, key=lambda x: (SEVERITIES.index(lookup(x.xid).severity), x.time))
        info = lookup(worst.xid)
        # The sample lists the latest Xids only; in a storm the counter says how many came.
        counts = [c for c in column(window, _xid_count, d.index) if c is not None]
        count = max(len(recent), int(growth(counts)))
        more = f", {count} Xids in {_minutes_since(recent[0].time, now)}" if count > 1 else ""
        what = info.description if info.known else "see NVIDIA's Xid catalog"
        cause = (f"{info.cause} (Xid {worst.xid}, {info.mnemonic}; NVIDIA's catalog: "
                 f"{info.action}.)" if info.known else info.cause)
        evidence = {"xid": worst.xid, "count": count, "first": recent[0].time,
                    "last": recent[-1].time}
        if isinstance(d.xid_count, int):
            evidence["since_start"] = d.xid_count
        out.append(Condition(
            id="xid", severity=info.severity, device=d.index,
            title=f"GPU{d.index}: Xid {worst.xid}, {what}{more}",
            cause=cause, fix=info.fix, evidence=evidence, score=count))
    return out


def _xid_count(s: Snapshot, index: int) -> float | None:
    d = s.device(index)
    return float(d.xid_count) if d is not None and isinstance(d.xid_count, int) else None


def _minutes_since(t: float, now: float) -> str:
    s = max(0.0, now - t)
    return f"{s / 60:.0f} min" if s >= 90 else f"{s:.0f} s"


def check_memory_errors(window: Sequence[Snapshot]) -> list[Condition]:
    if not window:
        return []
    out = []
    for d in window[-1].devices:
        if _lost(d):
            continue
        gpu = f"GPU{d.index}"
        new = growth(field_values(window, d.index, "ecc_uncorrected"))
        volatile = number(d.ecc_uncorrected) or 0.0
        if new > 0 or volatile > 0:
            # One tick says it too: the volatile count is since the driver last loaded, so any
            # count there is an error the GPU has not been reset from.
            what = f"{new:.0f} new" if new > 0 else f"{volatile:.0f}"
            out.append(Condition(
                id="ecc.uncorrected", severity="critical", device=d.index,
                title=f"{gpu}: {what} uncorrectable ECC error(s) since the driver loaded",
                cause="Uncorrectable memory errors corrupt data and usually crash the job.",
                fix=RESET_FIX + " Keep the GPU out of service if it repeats.",
                evidence={"new_uncorrected": new, "volatile_uncorrected": volatile},
                score=new + volatile))
        lifetime = number(d.ecc_uncorrected_aggregate) or 0.0
        if lifetime > 0:
            out.append(Condition(
                id="ecc.lifetime", severity="warning", device=d.index,
                title=f"{gpu}: {lifetime:.0f} uncorrectable ECC error(s) over its lifetime",
                cause="The GPU's aggregate count keeps every uncorrectable error since it was "
                      "made: it has failed before, and memory that failed once is likely to "
                      "fail again.",
                fix="Watch for new errors (Xid 48, 63, 64, 94, 95) and check its retired pages "
                    "or remapped rows; if they recur, take it out of service.",
                evidence={"lifetime_uncorrected": lifetime}, score=lifetime))
        if d.ecc_sram_threshold_exceeded is True:
            out.append(Condition(
                id="ecc.sram_threshold", severity="critical", device=d.index,
                title=f"{gpu}: its SRAM uncorrectable errors passed NVIDIA's threshold",
                cause="The GPU reports that uncorrectable errors in its on-chip SRAM exceeded "
                      "the threshold NVIDIA sets for replacing it.",
                fix="Take the GPU out of service and open a hardware ticket (RMA)."))
        if d.retire_pending is True:
            out.append(Condition(
                id="ecc.retire_pending", severity="warning", device=d.index,
                title=f"{gpu}: page retirement pending, reset the GPU to retire the page",
                cause="A memory page with ECC errors is marked for retirement; it is taken out "
                      "of use only after a GPU reset.",
                fix=RESET_FIX))
        if d.remap_failed is True:
            out.append(Condition(
                id="ecc.remap_failed", severity="critical", device=d.index,
                title=f"{gpu}: row remapping failed",
                cause="The GPU has no spare rows left to retire a failing memory row.",
                fix="Take the GPU out of service: it is an RMA candidate."))
        elif d.remap_pending is True:
            out.append(Condition(
                id="ecc.remap_pending", severity="warning", device=d.index,
                title=f"{gpu}: row remap pending, reset the GPU to activate it",
                cause="A failing memory row was marked for remapping; the spare row is used only "
                      "after a GPU reset.",
                fix=RESET_FIX))
    return out


def check_pcie(window: Sequence[Snapshot]) -> list[Condition]:
    recent = last(window, LOAD_WINDOW_S)
    out: list[Condition] = []
    for d in recent[-1].devices if recent else ():
        if _lost(d):
            continue
        out += _downtrained(recent, d)
        out += _replays(recent, d)
    return out


def _downtrained(window: Sequence[Snapshot], d: DeviceSample) -> list[Condition]:
    """Every loaded tick of the last minute ran below the link's max (an idle link may downshift
    to save power, so idle ticks say nothing)."""
    loaded = present(window, _loaded_below_max, d.index)
    if len(loaded) < PCIE_MIN_LOADED_TICKS or not all(loaded):
        return []
    link = _pcie(d)
    if link is None:
        return []
    gen, gen_max, width, width_max = link
    return [Condition(
        id="pcie.downtrained", severity="warning", device=d.index,
        title=f"GPU{d.index} PCIe runs Gen{gen:.0f} x{width:.0f} under load "
              f"(max Gen{gen_max:.0f} x{width_max:.0f})",
        cause="The link trained below its maximum speed or width, which cuts host-device "
              "bandwidth.",
        fix="Reseat the GPU or its riser, check the slot's BIOS settings and the riser cable.",
        evidence={"pcie_gen": gen, "pcie_gen_max": gen_max, "pcie_width": width,
                  "pcie_width_max": width_max})]


def _pcie(d: DeviceSample) -> tuple[float, float, float, float] | None:
    """(gen, max gen, width, max width) where all four are known."""
    gen, gen_max = number(d.pcie_gen), number(d.pcie_gen_max)
    width, width_max = number(d.pcie_width), number(d.pcie_width_max)
    if gen is None or gen_max is None or width is None or width_max is None:
        return None
    return gen, gen_max, width, width_max


def _loaded_below_max(s: Snapshot, index: int) -> bool | None:
    """Whether the link ran below its max at a tick under load; None when not under load."""
    x = device_at(s, index)
    if x is None or (number(x.util_gpu) or 0.0) < PCIE_LOAD:
        return None
    return _below_max(x)


def _below_max(d: DeviceSample) -> bool:
    link = _pcie(d)
    return link is not None and (link[0] < link[1] or link[2] < link[3])


def _replays(window: Sequence[Snapshot], d: DeviceSample) -> list[Condition]:
    ts, counts = field_readings(window, d.index, "pcie_replays")
    if len(ts) < 2 or ts[-1] - ts[0] < REPLAY_MIN_S:
        return []
    per_min = growth(counts) / (ts[-1] - ts[0]) * 60.0
    if per_min <= PCIE_REPLAYS_PER_MIN:
        return []
    return [Condition(
        id="pcie.replays", severity="warning", device=d.index,
        title=f"GPU{d.index} PCIe replays at {per_min:.0f}/min",
        cause="The PCIe link keeps retransmitting: a signal-integrity problem.",
        fix="Reseat the GPU or its riser and check the riser cable; if it persists, open a "
            "hardware ticket.",
        evidence={"replays_per_min": per_min})]


def check_nvlink(window: Sequence[Snapshot]) -> list[Condition]:
    if not window:
        return []
    now = {(lk.device_index, lk.link): lk for lk in window[-1].links}
    first = _first_links(window, set(now))
    errors: dict[int, dict[int, float]] = {}  # device -> link -> new errors
    down: dict[int, list[int]] = {}
    for key, lk in now.items():
        old = first[key]
        if (old is not lk and old.errors != lk.errors and not isinstance(lk.errors, Missing)
                and not isinstance(old.errors, Missing)):
            grown = sum(_grown(old.errors.get(c, 0), lk.errors.get(c, 0))
                        for c in NVLINK_COUNTERS)
            if grown:
                errors.setdefault(key[0], {})[key[1]] = grown
        if lk.up is False and _was_up(window, key):
            down.setdefault(key[0], []).append(key[1])
    out = []
    for index, links in sorted(down.items()):
        out.append(Condition(
            id="nvlink.down", severity="critical", device=index,
            title=f"GPU{index} NVLink {_links(links)} went down",
            cause="A link that was active is now inactive: traffic to its peer falls back to the "
                  "other links or to PCIe, or collectives hang.",
            fix="Reset the GPU; if the link stays down, check the NVSwitch/baseboard and open a "
                "hardware ticket.",
            evidence={"links_down": len(links)}))
    for index, by_link in sorted(errors.items()):
        total = sum(by_link.values())
        links = sorted(by_link)
        out.append(Condition(
            id="nvlink.errors", severity="warning", device=index,
            title=f"GPU{index} NVLink {_links(links)} errors rising: {total:.0f} new in "
                  f"{_minutes(window)}",
            cause="CRC, replay or recovery counters are growing: the link retransmits, which "
                  "costs bandwidth and can precede a link failure.",
            fix="Watch the rate; if it keeps rising, reset the GPU and check the NVLink/NVSwitch "
                "hardware.",
            evidence={"new_errors": total, "links": len(links), "first_link": links[0]},
            score=total))
    return out


def _first_links(window: Sequence[Snapshot],
                 keys: set[tuple[int, int]]) -> dict[tuple[int, int], LinkSample]:
    """Each link's oldest sample in the window (usually all in the oldest tick)."""
    first: dict[tuple[int, int], LinkSample] = {}
    for s in window:
        for lk in s.links:
            key = (lk.device_index, lk.link)
            if key in keys and key not in first:
                first[key] = lk
        if len(first) == len(keys):
            break
    return first


def _grown(old: int, new: int) -> int:
    return new - old if new >= old else new  # a drop is a reset (driver reload)


def _was_up(window: Sequence[Snapshot], key: tuple[int, int]) -> bool:
    return any(lk.up is True for s in window for lk in s.links
               if (lk.device_index, lk.link) == key)


def _links(links: list[int]) -> str:
    return ("link " if len(links) == 1 else "links ") + ",".join(str(n) for n in links)


def _minutes(window: Sequence[Snapshot]) -> str:
    s = window[-1].time - window[0].time
    return f"{s / 60:.0f} min" if s >= 90 else f"{s:.0f} s"


LOST = Diagnostic(name="gpu.lost", check=check_lost, window_s=0.0, every_s=0.0)
XID = Diagnostic(name="xid", check=check_xid, window_s=XID_QUIET_S, every_s=0.0,
                 reads_links=False)
MEMORY_ERRORS = Diagnostic(name="ecc", check=check_memory_errors, window_s=COUNTER_WINDOW_S)
# Open from the first loaded tick below the max; closed once the last minute has none.
PCIE = Diagnostic(name="pcie", check=check_pcie, window_s=LOAD_WINDOW_S, clear_s=LOAD_WINDOW_S)
NVLINK = Diagnostic(name="nvlink", check=check_nvlink, window_s=COUNTER_WINDOW_S)
