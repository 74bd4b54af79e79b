"""`gputop replay`: moving about a recording (replay.seek, replay.control) with the Findings the
diagnostics had at each tick (replay.timeline)."""
