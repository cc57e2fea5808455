"""The host outside the agent: containing the processes an incarnation starts (`jail`:
namespaces; `groups`: process groups killed and proven gone; `lifetime`: children that die
with faultsim), watching them (`strace`), and cheaper forks of the driver (`hugepages`).
Shared by every backend that runs real processes.

May import: the standard library and `errors`. Never pyfakefs, never a backend."""
