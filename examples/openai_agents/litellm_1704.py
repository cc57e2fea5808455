"""openai-agents-python#1704 on the SDK's LiteLLM route, over faultsim's fake Claude.

Not part of the test suite: litellm is not in faultsim's extras (see
docs/how-to/openai-agents.md for why the adapter does not take this route). Run it in a
separate virtualenv:

    python -m venv /tmp/v && /tmp/v/bin/pip install 'openai-agents[litellm]==0.24.0' \
        anthropic==2.14.0 'pyfakefs>=6.3,<6.4' 'freezegun>=1.5,<2' 'hypothesis>=6.150,<7' pytest
    OA_MODEL=claude-sonnet-4-5-20250929 PYTHONPATH=. /tmp/v/bin/python \
        examples/openai_agents/litellm_1704.py

An `LitellmModel("anthropic/...")` agent with thinking on (reasoning effort) and an
`SQLiteSession` talks to the fake on a loopback port (faultsim.model.endpoint.serve). The
first incarnation stops after turn 1's items are in the database (max_turns=1, as a crash
there would leave them); a second one, with fresh objects, resumes from the database. Each
request's thinking setting and assistant blocks are printed; the fake refuses a resumed
request whose last assistant turn lost its thinking block, as the API does. (litellm
refuses `reasoning_effort` for a model name it does not know: hence OA_MODEL.)
"""
import asyncio, json, os, sys, tempfile
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
from pathlib import Path
import faultsim
from faultsim.model.endpoint import serve
from agents import Agent, Runner, RunConfig, ModelSettings, SQLiteSession, function_tool, set_tracing_disabled
from agents.extensions.models.litellm_model import LitellmModel
from openai.types.shared import Reasoning
set_tracing_disabled(True)
sc = faultsim.load_scenario(Path(__file__).with_name("scenario.toml"))
world = sc.build_world()
_h = world.model.handle
def handle(req):
    b = json.loads(req.content or b"null")
    print("body: model", b.get("model"), "thinking", b.get("thinking"), "assistant blocks", [x.get("type") for m in b.get("messages", []) if m["role"] == "assistant" for x in (m["content"] if isinstance(m["content"], list) else [])][:6])
    return _h(req)
world.model.handle = handle

@function_tool
def pay_invoice(invoice: str, amount_cents: int) -> str:
    """Pay."""
    return json.dumps({"id": "p1"})

@function_tool
def send_email(to: str, body: str) -> str:
    """Send."""
    return json.dumps({"id": "e1"})

def agent(url):
    return Agent(name="billing", instructions="Pay and confirm.", tools=[pay_invoice, send_email],
                 model=LitellmModel(model=f"anthropic/{os.environ.get('OA_MODEL', sc.model)}", base_url=url, api_key="test"),
                 model_settings=ModelSettings(reasoning=Reasoning(effort="low")))

db = Path(tempfile.mkdtemp()) / "s.db"
with serve(world.model) as ep:
    url = ep.environ["ANTHROPIC_BASE_URL"]
    async def first():
        try:
            await Runner.run(agent(url), sc.task, session=SQLiteSession("b", str(db)), max_turns=1)
        except Exception as e:
            print("incarnation 1 stopped:", type(e).__name__)
    asyncio.run(first())
    rows = [json.loads(r) for (r,) in __import__("sqlite3").connect(db).execute("select message_data from agent_messages")]
    print("saved items:", [r.get("type", "message") for r in rows])
    async def second():
        try:
            r = await Runner.run(agent(url), [], session=SQLiteSession("b", str(db)))
            print("incarnation 2:", r.final_output)
        except Exception as e:
            print("incarnation 2 failed:", type(e).__name__, str(e)[:300])
    asyncio.run(second())
for q in world.model.requests:
    print("request", q.index, q.status, q.error, (q.message or "")[:160])
