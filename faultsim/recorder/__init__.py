"""Scenarios recorded, not hand-written: `faultsim scenario from-messages` and
`faultsim scenario record`.

- `toml`: a scenario document written as TOML, key by key in the order of the format's one
  table (`scenario.SECTIONS`), and checked by `faultsim validate`'s own walk and the loader
  before anyone sees it.
- `messages`: an Anthropic `messages` list (what an agent keeps) as a scenario document.
- `proxy`: a recording proxy on 127.0.0.1 that forwards to a Messages endpoint and keeps
  each request and answer (server-sent events passed through as they arrive).
- `record`: one run of an agent against that proxy, its `faultsim.effect` calls served by
  services made on first use, written as a scenario.

A front end (layer 6, beside cli): may import the layers below it; nothing imports it but
the CLI and tests.
"""
