"""Judging a crash run against the clean one: `oracle` (one guard per protocol rule, each
verdict naming its rule), `why` (the cause of a failure, where the trace tells it) and
`dbview` (an SQLite crash state in lines a person reads).

May import: the core, the world and the scenario. Never a backend: every backend judges
with the same oracle, which is what makes their verdicts comparable."""
