"""One module per known-broken shape of PROTOCOL.md, each breaking exactly one rule.

Every module exposes `make_agent` like the reference agent. faultsim must pass the
reference and catch each of these; a mutant it stops catching is a regression.
"""
NAMES = ("messages_only", "save_b_only", "overwrite_in_place", "rename_without_fsync",
         "unknown_version_parsed", "counters_reset", "reask_instead_of_reconcile",
         "orphan_tool_use", "key_after_effect", "progress_appended", "progress_trusted",
         "blind_without_intent")
# Mutants no single crash can catch: they break a rule only on the recovery path, so only a
# crash during recovery (a schedule of two crashes) shows them.
DOUBLE_CRASH_NAMES = ("reconcile_in_place", "repeat_before_save")
# Mutants of the database-backed stores (run them on a scenario with [store] kind = "redis",
# in subprocess mode); on the file store they behave like the reference agent.
STORE_NAMES = ("redis_two_writes", "ttl_on_running")
# A database-store mutant broken only on the recovery path: caught by pairs alone, in
# subprocess mode with `--crashes 2` (every single crash passes).
STORE_DOUBLE_CRASH_NAMES = ("recovery_two_writes",)
# Mutants of P13 (ownership): correct under every crash that ends the old incarnation,
# caught only by `--crash-model pause` (in process), where a paused one wakes beside the new.
PAUSE_NAMES = ("no_ownership", "unfenced_save", "fenced_effect_only")
