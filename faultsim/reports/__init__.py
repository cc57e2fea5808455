"""The report and every form it takes. Data: `report` (verdicts, model runs, the JSON and
text), `counts` (every count defined once), `shortcuts` (how often each shortcut applied),
`crashmap` (what the HTML page draws), `identity` (what `compare` aligns runs by),
`interrupted` (a run cut short), `merge` (shards joined) and `compare` (differential
verdicts). Writers, which read the JSON alone: `html` (with `html_report.js`/`.css`),
`junit`, `ci` (CI summaries and annotations). `outfile` writes each of them atomically.

May import: the core, the judge and the scenario. Never a backend or a front end."""
