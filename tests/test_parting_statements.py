"""Where two clean runs part on an SQL statement, the message shows both statements (their
text, shortened), not only the digest a trace event keeps of them (issue 51 item 14: a user
had to log SQL to find an index created in a varying order)."""
from __future__ import annotations

import textwrap

import pytest

from faultsim.errors import NonDeterminismError
from faultsim.interpose.sqlite import SHOWN, shown
from faultsim.real.explore import explore_subprocess
from faultsim.scenario import load_scenario

AGENT = """
import os, sqlite3

class Agent:
    def __init__(self, env):
        self.env = env

    def run(self):
        db = sqlite3.connect(os.path.join(str(self.env.workdir), "runs.db"))
        db.execute("CREATE TABLE IF NOT EXISTS runs (owner INTEGER)")
        db.execute("INSERT INTO runs VALUES (?)", (os.getpid(),))  # varies: the pid
        db.commit()
        answer = self.env.client.messages.create(model=self.env.model, max_tokens=64,
            messages=[{"role": "user", "content": self.env.task}])
        return answer.content[0].text

def make_agent(env):
    return Agent(env)
"""


def test_two_runs_that_part_on_a_statement_show_both(tmp_path):
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "s.toml").write_text(textwrap.dedent("""
        id = "sql_pid"
        task = "Say done."
        expected_final_answer = "done"
        [[turns]]
        final = "done"
    """))
    with pytest.raises(NonDeterminismError) as caught:
        explore_subprocess(f"{tmp_path / 'agent.py'}:make_agent",
                           load_scenario(tmp_path / "s.toml"))
    said = str(caught.value)
    assert "sqlite.exec INSERT runs" in said
    statements = said.split("They differ in what they ran: the first ")[1]
    first, second = statements.split(", the second ")
    assert first.startswith("'INSERT INTO runs VALUES (?) (") and \
        second.startswith("'INSERT INTO runs VALUES (?) (") and first != second


def test_a_long_statement_is_shortened_and_says_so():
    sql = "INSERT INTO t VALUES (" + ", ".join("?" * 400) + ")"
    text = shown(sql, ())
    assert len(text) == SHOWN and text.endswith("...")
    assert shown("SELECT\n   1", (2,)) == "SELECT 1 (2,)"
