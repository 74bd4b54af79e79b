"""The command line: one module per subcommand, and the argument types they share
(commands.args). This is where the rooms are wired together; nothing in gputop imports it."""
