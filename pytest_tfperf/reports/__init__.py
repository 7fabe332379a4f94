"""What a person reads: terminal and Markdown summaries, the HTML report and its charts, results merged from shards."""
