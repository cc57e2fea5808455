"""A package for tests/lazy_ids_agent.py."""
