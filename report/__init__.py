"""`palkit report`: bench files in; report.md, report.json, summary.json and charts out."""
