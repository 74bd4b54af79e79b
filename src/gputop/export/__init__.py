"""Snapshots leaving gputop for other tools: Prometheus metrics (`gputop serve`)."""
