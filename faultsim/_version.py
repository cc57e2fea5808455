"""faultsim's version, in a module of its own: what records it (a format corpus) imports
this, not the package root, so that nothing below the root imports the root."""
__version__ = "0.1.0"
