"""Reports: the JSON report and the terminal summary."""
