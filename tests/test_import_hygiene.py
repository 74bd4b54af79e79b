"""Nothing below the UI imports Textual: collection, recording and one-shot output stay light."""

import subprocess
import sys

CORE = ["gputop.model", "gputop.recording", "gputop.poller", "gputop.replay", "gputop.cli",
        "gputop.sources.nvml", "gputop.sources.host", "gputop.show.table", "gputop.safetext",
        "gputop.testing.fake_nvml", "gputop.probe", "gputop.probe_reader", "gputop.plan",
        "gputop.importers.nvsmi_xml", "gputop.sources.amd"]


def test_core_modules_do_not_import_textual() -> None:
    code = ("import sys\n" + "".join(f"import {m}\n" for m in CORE)
            + "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')]\n"
            + "print(','.join(bad))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == ""
