"""The subprocess backend (`--mode subprocess`): every incarnation is a real process on a
real directory, killed by SIGKILL. `explore` (the sweep, over `golden` (the clean run),
`crashes` (the kills), `judging` (resume and judge each crash state), `pairs` (two crashes),
`probes` (P4) and `jobs` (the fork servers' messages)), `replay` (a token's schedule),
`pool` (fork servers), `server` (one fork server), `child` (one incarnation), `fstrace`
(the real-directory interposer), `wire` (framing), `lifetime` (children die with their
parent), `jail` (the namespaces that contain each incarnation's process tree).

May import: `pipeline/` and what it may import (bottom layer, world, agent, scenario,
oracle, report), `interpose.sqlite`/`interpose.redis`. Never `inprocess/`, the
in-process orchestrator or pyfakefs: a fork server loads only what a real run needs
(tests/test_layers.py checks it)."""
