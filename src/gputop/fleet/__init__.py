"""Many nodes' GPUs through Prometheus (`gputop fleet`). No Textual here: the screens are in
gputop.ui.fleet."""
