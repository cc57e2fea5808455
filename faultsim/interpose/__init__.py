"""Interposers both backends share: what turns an agent's database writes into trace events
and kill points, and what makes an incarnation deterministic. `sqlite` and `redis` trace the
two database stores (used by the subprocess backend); `determinism` seeds uuid, random and
temporary names per incarnation; `loopback` is the HTTP servers faultsim runs beside the
agent (the fake Claude's endpoint, the world's services, the recording proxy); `netguard`,
`procguard` and `finality` guard what the agent's process may do. The in-process file
interposer hooks pyfakefs, so it lives with its backend (`inprocess/fs.py`).

May import: the bottom layer (trace, crashmodel) and their third-party library (sqlite3,
redis); never pyfakefs, so the subprocess backend can load this package."""
