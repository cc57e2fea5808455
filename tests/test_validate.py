"""`faultsim validate` and the scenario schema: every problem of a file at once, each on its
line; the committed schema is the generated one; the loader, the schema and the validator
read one table."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from faultsim.cli import main
from faultsim.scenario import SECTIONS, ScenarioError, load_scenario
from faultsim.scenario.schema import SCHEMA_FILE, dumps, schema
from faultsim.scenario.validate import line_of, locate, validate_file

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = sorted((ROOT / "scenarios").rglob("*.toml")) + sorted(
    (ROOT / "tests" / "data").glob("*.toml"))

BAD = """\
id = "bad"
task = "Do it."
expected_final_answer = "Done."
colour = "red"

[services.payments]
kind = "keyd"
key_retention_hours = -1

[[turns]]
tool_calls = [{ name = "lookup_order", input = { order_id = "ORD-7" } }]
final = "x"

[[turns]]
tool_calls = [
  { name = "a" },
  { nme = "b" },
]

[fault_profile]
crashes = 0
downtime = "3 weeks"
api_faults = [{ at = 9, kind = "418" }]
"""


def test_the_committed_schema_is_the_generated_one():
    # regenerate with: python -m faultsim scenario schema > faultsim/scenario.schema.json
    assert SCHEMA_FILE.read_text(encoding="utf-8") == dumps()


def test_scenario_schema_prints_it(capsys):
    assert main(["scenario", "schema"]) == 0
    assert json.loads(capsys.readouterr().out) == schema()


def test_the_schema_has_every_key_of_the_loaders_table():
    s = schema()
    defs = {"scenario": s, **s["$defs"]}
    for name, fields in SECTIONS.items():
        assert set(defs[name]["properties"]) == set(fields), name
        assert defs[name]["additionalProperties"] is False
        assert set(defs[name].get("required", [])) == {k for k, f in fields.items()
                                                       if f.required}, name
    assert defs["fault_profile"]["properties"]["crashes"] == {
        "description": "an integer >= 1; the most crashes in one schedule",
        "type": "integer", "minimum": 1, "default": 2}


def _conforms(value, node, defs, where="") -> list[str]:
    """A small walk of the schema's object keywords over a value (jsonschema is not a
    dependency): unknown and missing keys, through $ref, items and additionalProperties."""
    if "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[1]]
    out = []
    if isinstance(value, dict) and "properties" in node:
        out += [f"{where}.{k}: unknown" for k in value if k not in node["properties"]]
        out += [f"{where}.{k}: missing" for k in node.get("required", []) if k not in value]
        for k, v in value.items():
            if k in node["properties"]:
                out += _conforms(v, node["properties"][k], defs, f"{where}.{k}")
    elif isinstance(value, dict) and isinstance(node.get("additionalProperties"), dict):
        for k, v in value.items():
            out += _conforms(v, node["additionalProperties"], defs, f"{where}.{k}")
    elif isinstance(value, list) and "items" in node:
        for k, v in enumerate(value):
            out += _conforms(v, node["items"], defs, f"{where}[{k}]")
    return out


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_every_bundled_scenario_is_valid_for_the_schema_and_the_validator(path):
    import tomllib

    s = schema()
    data = tomllib.loads(path.read_text())
    assert _conforms(data, s, s["$defs"]) == []
    assert validate_file(path) == []


def test_the_schema_refuses_an_unknown_and_a_missing_key():
    s = schema()
    data = {"task": "t", "colour": 1, "turns": [{"final": "x", "size": 2}]}
    assert _conforms(data, s, s["$defs"]) == [
        ".colour: unknown", ".expected_final_answer: missing", ".turns[0].size: unknown"]


def test_validate_reports_every_problem_on_its_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(BAD)
    got = [str(p).removeprefix(str(bad) + ":") for p in validate_file(bad)]
    assert got == [
        "4: colour: expected one of the known keys checkpoint, expected_final_answer, "
        "fault_profile, id, langgraph, max_turns, model, prefill_models, sandbox, services, "
        "start_time, store, subagents, task, turns, got 'an unknown key'",
        "7: services.payments.kind: expected one of keyed, queryable, blind, readonly, "
        "got 'keyd'",
        "8: services.payments.key_retention_hours: expected a positive number, got -1",
        "10: turns[0]: expected exactly one of 'tool_calls' or 'final', got 'both'",
        "10: turns: expected a last turn with a 'final' answer",
        "12: turns[0].final: expected the final answer only in the last turn "
        "(or in a turn with a follow_up, which the next turn answers)",
        "17: turns[1].tool_calls[1].nme: expected one of the known keys input, name, "
        "got 'an unknown key'",
        "17: turns[1].tool_calls[1].name: expected a tool name (missing)",
        "21: fault_profile.crashes: expected an integer >= 1, got 0",
        '22: fault_profile.downtime: expected a duration such as "90s", "45m", "25h", "2d", '
        '"1h30m", or seconds, got \'3 weeks\'',
        "23: fault_profile.api_faults[0].kind: expected one of 429, 529, 500, timeout, "
        "stream_cut, max_tokens, pause_turn, refusal, got '418'",
        "23: fault_profile.api_faults[0].at: expected a turn position 0..1, got 9",
    ]


# Each: a valid file's text with one mistake (a text replaced, or with "" a table
# appended), and the key the loader names. The validator
# reports that key too (it never misses what the loader refuses), on the line written.
VALID = (ROOT / "tests" / "data" / "tiny.toml").read_text()
MISTAKES = [
    ('kind = "blind"', 'kind = "blind"\nrecords.X = { a = 1 }', "services.email.records"),
    ('id = "tiny"', 'id = "tiny"\nstart_time = "yesterday"', "start_time"),
    ('', '[sandbox]\nallow = ["nohost"]', "sandbox.allow[0]"),
    ('', '[checkpoint]\nfiles = ["/etc/x"]', "checkpoint.files[0]"),
    ('', '[store]\nkind = "mongo"', "store.kind"),
    ('', '[langgraph]\ngraph = "nocolon"', "langgraph.graph"),
    ('', '[fault_profile]\ncrash_models = ["process", "process"]',
     "fault_profile.crash_models"),
    ('', '[fault_profile]\napi_faults = [{ at = 0, kind = "529", '
     'script = "ghost" }]', "fault_profile.api_faults[0].script"),
    ('', '[[faults]]\nat = 1', "faults"),
    ('', '[subagents.s]\ntask = "x"\n[[subagents.s.turns]]\n'
     'final = "y"', "subagents.s"),
    ('{ name = "lookup_order", input = { order_id = "ORD-7" } }',
     '{ name = "", input = { order_id = "ORD-7" } }', "turns[0].tool_calls[0].name"),
    ('final = "Refunded ORD-7, noted, told the customer, receipt filed."', 'text = "t"',
     "turns[4]"),
]


@pytest.mark.parametrize("old,new,key", MISTAKES, ids=[m[2] for m in MISTAKES])
def test_validate_names_what_the_loader_refuses(tmp_path, old, new, key):
    path = tmp_path / "s.toml"
    assert old in VALID
    text = VALID.replace(old, new, 1) if old else VALID + new + "\n"
    path.write_text(text)
    with pytest.raises(ScenarioError) as loaded:
        load_scenario(path)
    assert loaded.value.key == key
    found = {p.key: p for p in validate_file(path)}
    assert key in found, found
    line = text.splitlines()[found[key].line - 1].strip()
    # the line the mistake is written on, or its table's header
    assert line in {"[[turns]]", "[subagents.s]", "[[faults]]"} or \
        new.splitlines()[-1].strip() in line, found[key]


def test_locate_headers_keys_and_array_elements():
    lines = locate(BAD)
    assert lines["services.payments"] == 6 and lines["services.payments.kind"] == 7
    assert lines["turns[0]"] == 10 and lines["turns[1]"] == 14
    assert lines["turns[1].tool_calls"] == 15 and lines["turns[1].tool_calls[1]"] == 17
    assert line_of("turns[0].tool_calls[0].input.order_id", lines) == 11  # inline: its key
    assert line_of("task", {}) == 1
    text = 'x = """\n[not.a.header]\n"""\n[a."b.c"]\nd = 1\n'
    assert locate(text) == {"x": 1, "a": 4, "a.b.c": 4, "a.b.c.d": 5}


def test_syntax_error_and_missing_file_are_one_line_each(tmp_path):
    broken = tmp_path / "broken.toml"
    broken.write_text('id = "x"\ntask = \n')
    [p] = validate_file(broken)
    assert (p.line, p.key) == (2, "(syntax)")
    [p] = validate_file(tmp_path / "none.toml")
    assert p.key == "(file)"


def test_the_command_exits_2_on_any_problem_and_0_when_all_are_valid(tmp_path, capsys):
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "deep").mkdir()
    (tmp_path / "good" / "deep" / "tiny.toml").write_text(VALID)
    (tmp_path / "bad.toml").write_text(BAD)
    assert main(["validate", str(tmp_path / "good")]) == 0
    assert "1 scenario file, all valid" in capsys.readouterr().err
    assert main(["validate", str(tmp_path / "good"), str(tmp_path / "bad.toml")]) == 2
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 12
    assert all(line.startswith(f"{tmp_path / 'bad.toml'}:") for line in
               captured.out.splitlines())
    assert "1 of 2 files invalid, 12 problems" in captured.err


def test_validate_imports_no_agent_and_no_sdk(tmp_path):
    (tmp_path / "tiny.toml").write_text(VALID)
    code = ("import sys; from faultsim.cli import main; rc = main(['validate', %r]); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'anthropic', "
            "'reference_agent', 'pyfakefs', 'hypothesis'})); sys.exit(rc)"
            % str(tmp_path / "tiny.toml"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_pre_commit_hook_validates_scenario_files():
    import re

    import yaml

    [hook] = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "faultsim-validate" and hook["entry"] == "faultsim validate"
    files = re.compile(hook["files"])
    assert files.search("scenarios/refunds.toml")
    assert files.search("tests/scenarios/deep/x.toml")
    assert not files.search("pyproject.toml") and not files.search("scenarios/graphs.py")


def test_the_loader_takes_its_defaults_from_the_table(tmp_path):
    path = tmp_path / "least.toml"
    path.write_text('task = "t"\nexpected_final_answer = "a"\n[[turns]]\nfinal = "a"\n')
    sc = load_scenario(path)
    profile = SECTIONS["fault_profile"]
    assert sc.profile.crash_models == tuple(profile["crash_models"].default)
    assert (sc.profile.crashes, sc.profile.downtime, sc.profile.powersafe_overwrite) == (
        profile["crashes"].default, profile["downtime"].default,
        profile["powersafe_overwrite"].default)
    assert sc.model == SECTIONS["scenario"]["model"].default
    assert sc.store.kind == SECTIONS["store"]["kind"].default
    assert sc.start_time.startswith(SECTIONS["scenario"]["start_time"].default[:19])
    assert sc.id == "least"
    assert sc.max_turns == SECTIONS["scenario"]["max_turns"].default


def _paths(value, path=()):
    """Every (path, value) inside a parsed TOML document."""
    yield path, value
    items = value.items() if isinstance(value, dict) else \
        enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        yield from _paths(item, path + (key,))


_ODD = [None, "", " ", "x", "529", "keyed", "process", "1h", "s", 0, -1, 3, 1.5, True, [],
        [1], ["process", "process"], {}, {"a": 1}, {"final": "x"}, "2026-13-01"]


THREE = """\
task = "Do it."
expected_final_answer = "Done."

[[turns]]
final = "Too early."

[[turns]]
final = "Done."

[services.mailer]
kind = "blind"
records = { r1 = { to = "ada@example.com" } }

[checkpoint]
files = ["../state.json"]
"""


def test_three_broken_rules_are_three_lines_and_the_loader_raises_the_first(tmp_path,
                                                                            capsys):
    # one rule set (faultsim.scenario.rules): validate reports what the loader refuses
    path = tmp_path / "three.toml"
    path.write_text(THREE)
    assert main(["validate", str(path)]) == 2
    assert capsys.readouterr().out.splitlines() == [
        f"{path}:5: turns[0].final: expected the final answer only in the last turn "
        "(or in a turn with a follow_up, which the next turn answers)",
        f"{path}:12: services.mailer.records: expected records only on queryable or "
        "readonly services, got 'blind'",
        f"{path}:15: checkpoint.files[0]: expected a glob relative to the workdir, got "
        "'../state.json'"]
    with pytest.raises(ScenarioError) as exc:
        load_scenario(path)
    assert str(exc.value) == f"{path}: turns[0].final: expected the final answer only in " \
        "the last turn (or in a turn with a follow_up, which the next turn answers)"
    # fixed one by one, each next problem is the loader's first
    path.write_text(THREE.replace('final = "Too early."', 'tool_calls = [{ name = "a" }]'))
    with pytest.raises(ScenarioError, match=r"services\.mailer\.records: expected records"):
        load_scenario(path)
    path.write_text(THREE.replace('final = "Too early."', 'tool_calls = [{ name = "a" }]')
                    .replace('kind = "blind"', 'kind = "readonly"'))
    with pytest.raises(ScenarioError, match=r"checkpoint\.files\[0\]: expected a glob "):
        load_scenario(path)


def test_the_rules_beyond_one_keys_type_are_written_once():
    # each rule's words live in faultsim/scenario/rules.py only: the loader and validate's
    # walk both call it (adding a rule touches one place)
    words = ["exactly one of 'tool_calls' or 'final'", "the final answer only in the last",
             "a last turn with a 'final' answer", "records only on queryable",
             "a sub-agent name other than", "task texts distinct",
             "FILE.py:ATTR or MODULE:ATTR", "a glob relative to the workdir",
             "at least one glob", "127.0.0.1:6379"]
    folder = ROOT / "faultsim" / "scenario"
    for path in folder.glob("*.py"):
        text = path.read_text()
        for said in words:
            assert (said in text) == (path.name == "rules.py"), (path.name, said)


def test_validate_agrees_with_the_loader_on_mutated_files():
    """Mutate the library's files at random places: the walk alone (without the loader
    as a backstop) finds nothing exactly when the loader accepts the file, and never
    raises."""
    import copy
    import tomllib

    from hypothesis import HealthCheck, given, settings, strategies as st

    from faultsim.scenario.validate import problems

    docs = [tomllib.loads(p.read_text()) for p in SCENARIOS]

    @settings(max_examples=400, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def check(draw):
        data = copy.deepcopy(draw.draw(st.sampled_from(docs)))
        for _ in range(draw.draw(st.integers(1, 3))):
            paths = [p for p, _ in _paths(data) if p]
            path = draw.draw(st.sampled_from(paths))
            parent = data
            for key in path[:-1]:
                parent = parent[key]
            new = draw.draw(st.sampled_from(_ODD + ["unknown_key"]))
            if new is None:
                del parent[path[-1]]
            elif new == "unknown_key" and isinstance(parent, dict):
                parent["colour"] = 1
            else:
                parent[path[-1]] = copy.deepcopy(new)
        found = problems(data, "s.toml", backstop=False)
        try:
            parse_scenario(data, "s.toml")
            accepted = True
        except ScenarioError:
            accepted = False
        assert (found == []) == accepted, found

    from faultsim.scenario import parse_scenario

    check()
