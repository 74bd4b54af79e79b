"""Xid errors: what the common ones mean, how bad they are and what to do.

NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html) gives each Xid
a mnemonic and a "Resolution Bucket (Immediate Action)". The descriptions below are the catalog's
words as dcgm-exporter carries them (its `err_msg` label), the buckets as NVIDIA's NVSentinel
carries them (`xiderrorsmapping.csv`). Severity follows the bucket (docs/diagnostics.md §8 R8):
restarting the application is a warning; resetting the GPU, rebooting, NVIDIA's hardware workflows
and contacting support are critical; what the catalog says to ignore is info. An Xid not in the
table is a warning that points to the catalog.
"""

from __future__ import annotations

from dataclasses import dataclass

CATALOG = "NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors)"

SEVERITY = {
    "IGNORE": "info",
    "WORKFLOW_XID_45": "info",
    "RESTART_APP": "warning",
    "RESET_GPU": "critical",
    "RESTART_BM": "critical",
    "CONTACT_SUPPORT": "critical",
    "WORKFLOW_XID_48": "critical",
    "WORKFLOW_NVLINK_ERR": "critical",
}

# The catalog's immediate action, in words.
ACTION = {
    "IGNORE": "no action",
    "WORKFLOW_XID_45": "no action unless another Xid came with it",
    "RESTART_APP": "restart the application",
    "RESET_GPU": "reset the GPU",
    "RESTART_BM": "reboot the node",
    "CONTACT_SUPPORT": "contact NVIDIA support",
    "WORKFLOW_XID_48": "drain and reset the GPU (double-bit ECC workflow)",
    "WORKFLOW_NVLINK_ERR": "reset the GPU (NVLink error workflow)",
}

RESET = "Drain the node's jobs from this GPU and reset it (nvidia-smi -r) or reboot."
_APP = ("Restart the job; to find the kernel, run it under compute-sanitizer (or with "
        "CUDA_LAUNCH_BLOCKING=1). If it repeats on this GPU only, with code known to be good, "
        "test the GPU with `dcgmi diag -r 3`.")


@dataclass(frozen=True)
class XidInfo:
    xid: int
    mnemonic: str  # NVIDIA's name, e.g. ROBUST_CHANNEL_GR_EXCEPTION; "" when unknown
    description: str
    bucket: str  # the catalog's immediate action; "" when unknown
    cause: str
    fix: str

    @property
    def known(self) -> bool:
        return bool(self.mnemonic)

    @property
    def severity(self) -> str:
        return SEVERITY.get(self.bucket, "warning")

    @property
    def action(self) -> str:
        return ACTION.get(self.bucket, f"see {CATALOG}")


TABLE: dict[int, XidInfo] = {x.xid: x for x in (
    XidInfo(13, "ROBUST_CHANNEL_GR_EXCEPTION", "Graphics Engine Exception", "RESTART_APP",
            "Usually a bug in the application: a kernel read or wrote out of bounds or ran an "
            "illegal instruction.", _APP),
    XidInfo(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", "RESTART_APP",
            "Usually the application touched GPU memory it does not own (a bad index, a freed "
            "buffer).", _APP),
    XidInfo(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", "IGNORE",
            "The driver stopped an application's work after an error of that application (often "
            "an Xid 13 or 31 just before); the GPU itself keeps working.",
            "Nothing to do for the GPU; look at the application that failed."),
    XidInfo(45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Preemptive cleanup, due to previous errors",
            "WORKFLOW_XID_45",
            "The driver cleaned up a process's GPU work as it was killed or after an earlier "
            "error.",
            "Nothing to do by itself; if another Xid came just before it, follow that one."),
    XidInfo(48, "ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", "WORKFLOW_XID_48",
            "An uncorrectable memory error: data on the GPU was corrupted and the job using it "
            "usually crashes.", RESET + " Keep the GPU out of service if it repeats."),
    XidInfo(61, "PMU_BREAKPOINT", "Internal micro-controller breakpoint/warning",
            "CONTACT_SUPPORT", "The GPU's power-management micro-controller hit an internal error.",
            RESET + " If it repeats, send nvidia-bug-report.sh output to NVIDIA support."),
    XidInfo(62, "PMU_HALT_ERROR", "Internal micro-controller halt", "RESET_GPU",
            "The GPU's power-management micro-controller halted.", RESET),
    XidInfo(63, "INFOROM_DRAM_RETIREMENT_EVENT",
            "ECC page retirement or row remapping recording event", "IGNORE",
            "A failing memory row was recorded for retirement or remapping.",
            "Nothing now: the row is remapped at the next GPU reset (the row-remap finding says "
            "when one is due)."),
    XidInfo(64, "INFOROM_DRAM_RETIREMENT_FAILURE",
            "ECC page retirement or row remapper recording failure", "RESET_GPU",
            "The GPU could not record a failing memory row for retirement.",
            RESET + " If it repeats, the GPU is an RMA candidate."),
    XidInfo(68, "ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 Exception", "RESTART_APP",
            "The video decoder raised an exception, usually from the application's input or "
            "use of it.", "Restart the application that decodes video on this GPU."),
    XidInfo(69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", "RESTART_APP",
            "The application sent the graphics/compute engine a command it could not run.", _APP),
    XidInfo(74, "NVLINK_ERROR", "NVLINK Error", "WORKFLOW_NVLINK_ERR",
            "An NVLink link of this GPU failed: collectives over it fail or hang.",
            RESET + " `nvidia-smi nvlink -e` shows the links' error counters; if a link keeps "
            "failing, check the NVSwitch/baseboard and open a hardware ticket."),
    XidInfo(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus",
            "RESTART_BM", "The GPU stopped answering on PCIe; nothing can use it until the node "
            "is rebooted.",
            "Reboot the node; if it happens again, check the GPU's power, seating and riser and "
            "open a hardware ticket."),
    XidInfo(92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", "IGNORE",
            "Memory errors are being corrected at a high rate.",
            "Nothing now; if corrected ECC errors keep rising, plan to take the GPU out of "
            "service."),
    XidInfo(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained ECC error", "RESTART_APP",
            "An uncorrectable memory error hit one application; the GPU contained it and keeps "
            "serving the others.",
            "Restart the application that was hit; reset the GPU when it is drained so the "
            "failing row is remapped."),
    XidInfo(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained ECC error", "RESET_GPU",
            "An uncorrectable memory error the GPU could not contain: every application on it "
            "is affected.", RESET),
    XidInfo(109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context Switch Timeout Error",
            "RESET_GPU", "The GPU did not switch between applications in time and is stuck.",
            RESET),
    XidInfo(119, "GSP_RPC_TIMEOUT", "GSP RPC Timeout", "RESET_GPU",
            "The GPU's system processor (GSP) firmware stopped answering the driver.",
            RESET + " If it repeats, update the driver."),
    XidInfo(120, "GSP_ERROR", "GSP Error", "RESET_GPU",
            "The GPU's system processor (GSP) firmware reported an error.",
            RESET + " If it repeats, update the driver."),
    XidInfo(154, "GPU_RECOVERY_ACTION_CHANGED", "GPU Recovery Action Changed", "",
            "The driver now asks for a recovery action for this GPU (a reset, a reboot or "
            "draining peer-to-peer traffic), after another error.",
            "Follow the Xid logged just before it (dmesg) and do the recovery the driver asks "
            "for."),
)}


def lookup(xid: int) -> XidInfo:
    """What gputop knows of an Xid; an unknown one points to NVIDIA's catalog."""
    found = TABLE.get(xid)
    if found is not None:
        return found
    return XidInfo(xid, "", "not in gputop's table", "",
                   f"The driver reported Xid {xid}; see {CATALOG} for what it means.",
                   f"Look Xid {xid} up in {CATALOG} and follow its resolution.")


def label(xid: int) -> str:
    """`Xid 13 Graphics Engine Exception`, for a line on screen."""
    info = TABLE.get(xid)
    return f"Xid {xid} {info.description}" if info else f"Xid {xid}"


def message(xid: int) -> str:
    """dcgm-exporter's `err_msg` label for the last Xid: "No Error" for none."""
    if xid == 0:
        return "No Error"
    info = TABLE.get(xid)
    return info.description if info else "Unknown Error"
