"""The normative spec: rule files in Markdown, the schedule vocabulary, the adapter protocol."""
