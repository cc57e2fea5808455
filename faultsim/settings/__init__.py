"""What a run is asked to do: `options` (one validated `ExploreOptions`, the settings of an
exploration), `config` (a project's `[tool.faultsim]`, so `faultsim run` needs no arguments
in it) and `loading` (which agent an `--agent` spec names).

May import: the core and the scenario format. Every front end reads its settings here."""
