"""faultsim's pytest front end, a package of its own (the plugin loads in every pytest
session, so nothing here is imported before it is used):

- `plugin`: the entry point (`pytest11: faultsim`): options, hooks, fixtures;
- `settings`: the marker, `faultsim.parametrize`, the options, one test's settings;
- `state`: what a session keeps, the kill-point items' parameters;
- `fixture`: `crash_safety`, what a test sees (`FaultsimFixture`);
- `summary`: the terminal summary and the session's HTML page.

Its modules `import pytest` absolutely: that is always pytest itself.
"""
