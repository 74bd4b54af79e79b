"""What a recording says after the fact: its recap (report.recap), the summary the recorder keeps
of each file so a report need not read the ticks (report.summary), and the report as text, HTML
or a table (report.text, report.html, report.table)."""
