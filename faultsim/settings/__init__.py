"""What a run is asked to do: `table` (every setting declared once, the flags, variables,
keys and options of every front end made from it), `options` (one validated
`ExploreOptions`, the settings of an exploration), `config` (a project's `[tool.faultsim]`, so `faultsim run` needs no arguments
in it) and `loading` (which agent an `--agent` spec names).

May import: the core and the scenario format. Every front end reads its settings here."""
