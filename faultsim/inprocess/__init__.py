"""The in-process backend: the agent runs under pyfakefs in this process. `sandbox` (the
Explorer: one pyfakefs file system, a kill at a kill point, one resumed run judged), `fs`
(its interposer: the pyfakefs hooks that trace writes and stage crash states), the
executors `replaying` (the prefix replayed per kill point) and `forking` (one driver run, a
forked child per kill point), `pairs` (two-crash schedules), `counting` (the plan's
crash-state count) and `probes` (tampered checkpoints: the P4 version probe).

May import: `pipeline/` and what it may import, pyfakefs, `interpose/` (determinism). Never
`real/` (the other backend), never the orchestrator (`engine`) or the front ends."""
