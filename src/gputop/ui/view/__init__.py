"""What the dashboard shows, without Textual: number formats, GPU status and badges, the keys,
the process rows and their order, graph history, who may kill what, and the plain table of
`gputop --once`. Widgets and screens turn these into Textual content; tests read them directly."""
