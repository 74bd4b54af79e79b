"""Clock-event (throttle) reasons: the vendor-neutral names a DeviceSample carries, and NVML's
bit for each (nvmlClocksEventReasons, also the bits of nvidia-smi's clocks_event_reasons.active).
Xid meanings are in model.xid."""

from __future__ import annotations

# Clock-event (throttle) reasons, vendor-neutral names.
THROTTLE = (
    "gpu_idle",
    "app_clocks",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal",
    "hw_thermal",
    "hw_power_brake",
    "display_clocks",
    "board_limit",  # AMD PPT / board power limits
    "current_limit",  # AMD TDC/EDC
    "prochot",
)

# NVML clock-event reason bits (nvml.h, nvmlClocksEventReasons) -> THROTTLE names.
REASON_BITS = {
    0x001: "gpu_idle",
    0x002: "app_clocks",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal",
    0x040: "hw_thermal",
    0x080: "hw_power_brake",
    0x100: "display_clocks",
}
