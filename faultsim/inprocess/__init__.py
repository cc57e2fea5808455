"""The in-process backend: the agent runs under pyfakefs in this process. Its orchestrator
`explore` (`faultsim.explore`: golden run, sweep, pairs, probe, search, in that order) and
`backend` (its face behind `faultsim.backends`); `session` (`faultsim.Session`: any crash
schedule), `search` (`faultsim.search`: hypothesis over a session) and `pointwise` (the
pytest plugin's kill-point items); `sandbox` (the Explorer: one pyfakefs file system, a
kill at a kill point, one resumed run judged), `fs` (its interposer: the pyfakefs hooks
that trace writes and stage crash states), the executors `replaying` (the prefix replayed
per kill point) and `forking` (one driver run, a forked child per kill point), `pairs`
(two-crash schedules) and `crash_feed` (their first crashes from one driver run), `pause`
(the paused incarnation), `counting` (the plan's crash-state count), `probes` (tampered
checkpoints: the P4 version probe), and the exact shortcuts (`convergence`, `leads`,
`board`, `after_convergence`, `unwind`, read from the interpreter's frames as `cpython`
allows).

May import: `pipeline/` and what it may import, pyfakefs, `interpose/` (determinism).
Never `real/`, `command/` or an adapter (the other backends), never a front end."""
