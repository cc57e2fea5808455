"""The mode-neutral pipeline, shared by both backends: one incarnation and what reaches its
trace (`incarnation`), the golden run's flake guard (`golden`), the sweep's bookkeeping
of verdicts and memos (`sweep`), and the kill-point loop of the real-process backends with
its conversion to the report (`crashes`).

May import: the bottom layer (errors, trace, killpoints, crashmodel, token), world, agent,
scenario, oracle, report, freezegun. Never pyfakefs, never a fork, never a backend
(`inprocess/`, `real/`): the subprocess backend's fork servers import this package."""
