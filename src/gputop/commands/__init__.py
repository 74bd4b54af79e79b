"""The command line: one module per subcommand, and the argument types they share
(commands.args). This is where the rooms are wired together; nothing in gputop imports it."""

# `gputop SUBCOMMAND`: the module of each, imported only when it is asked for.
COMMANDS = {
    "replay": "gputop.commands.replay",
    "report": "gputop.commands.report",
    "import": "gputop.commands.import_logs",
    "plan": "gputop.commands.plan",
    "serve": "gputop.commands.serve",
    "fleet": "gputop.commands.fleet",
    "export": "gputop.commands.export",
}
