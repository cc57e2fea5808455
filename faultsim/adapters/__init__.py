"""Adapters: faultsim's explorer driving agents built on other frameworks, unchanged.

Each lives in its own extra (`pip install 'faultsim[langgraph]'`), imported only when used.
"""
