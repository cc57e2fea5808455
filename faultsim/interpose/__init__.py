"""Interposers: what turns an agent's writes into trace events and kill points. `fs` hooks
pyfakefs (the in-process backend's file system); `sqlite` and `redis` trace the two
database stores (used by the subprocess backend); `determinism` seeds uuid, random and
temporary names per incarnation.

May import: the bottom layer (trace, crashmodel) and their third-party library (pyfakefs,
sqlite3, redis); `fs` is imported only by the in-process side."""
