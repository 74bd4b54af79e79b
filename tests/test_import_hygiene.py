"""Nothing below the UI imports Textual: collection, recording and one-shot output stay light."""

import subprocess
import sys

CORE = ["gputop.model", "gputop.recording", "gputop.sources.poller", "gputop.feeds.playback",
        "gputop.commands.main", "gputop.commands.monitor", "gputop.feeds.live",
        "gputop.sources.nvml", "gputop.sources.host", "gputop.ui.view.table", "gputop.safetext",
        "gputop.testing.fake_nvml", "gputop.probe", "gputop.sources.probe_files", "gputop.plan",
        "gputop.importers.nvsmi_xml", "gputop.sources.amd", "gputop.ui", "gputop.ui.view.format",
        "gputop.ui.view.kill", "gputop.ui.view.process_rows", "gputop.ui.view.status",
        "gputop.ui.view.keys", "gputop.ui.view.history", "gputop.ui.view.styles"]


def test_core_modules_do_not_import_textual() -> None:
    code = ("import sys\n" + "".join(f"import {m}\n" for m in CORE)
            + "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')]\n"
            + "print(','.join(bad))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == ""
