"""The vocabulary every other folder speaks, below the public types: what an incarnation
did (`trace`), what a crash leaves on disk (`crashmodel`), where an agent keeps its state
(`checkpoints`), the class of a kill point and the representative coverage drawn from them
(`classes`), faultsim's own hypothesis draws (`draws`), and two file primitives that
pyfakefs cannot intercept (`realfile`, `tree`).

May import: the standard library and the public vocabulary at the root (`errors`,
`killpoints`). Nothing here runs an agent."""
