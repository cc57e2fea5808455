"""Adapters: faultsim's explorer driving agents built on other frameworks, unchanged.

Each lives in its own extra (`pip install 'faultsim[langgraph]'`), imported only when used.

The top layer: may import anything in faultsim; nothing in faultsim imports it at load time
(`loading.factory_for` resolves `langgraph:MODE` with a function-level import).
"""
