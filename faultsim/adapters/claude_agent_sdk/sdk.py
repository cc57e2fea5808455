"""The Claude Agent SDK and its bundled Claude Code CLI as the adapter finds them: the
pinned versions, the SDK internals it hooks, and the environment each CLI runs with."""
from __future__ import annotations

import os
from pathlib import Path

try:
    import claude_agent_sdk  # noqa: F401 - installed?
    from claude_agent_sdk._internal import query as sdk_query
    from claude_agent_sdk._internal.transport import subprocess_cli as sdk_cli
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError("faultsim.adapters.claude_agent_sdk needs the claude-agent-sdk extra: "
                      f"pip install 'faultsim[claude-agent-sdk]' ({exc})") from None

SDK_VERSION = "0.2.184"  # the release this adapter is written against (pyproject pins it)
CLI_VERSION = "2.1.327"  # the Claude Code CLI that release bundles

# Credentials the CLI would use instead of the fake key: never passed on.
SECRETS = ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_BEDROCK_BASE_URL",
            "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY",
            "CLAUDECODE")



def cli_environment(base_url: str, api_key: str, root: Path) -> dict[str, str]:
    """The variables one incarnation's CLI runs with (see the module docstring)."""
    return {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": api_key,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
            "ENABLE_TOOL_SEARCH": "false",
            "CLAUDE_CONFIG_DIR": str(root / "claude"), "HOME": str(root / "home"),
            "TMPDIR": str(root / "tmp")}


def cli_unavailable() -> str | None:
    """Why the bundled Claude Code CLI cannot run here (one line), or None when it can."""
    import subprocess

    cli = sdk_cli.SubprocessCLITransport._find_bundled_cli(None)  # type: ignore[arg-type]
    if cli is None:
        return "the claude-agent-sdk wheel bundles no Claude Code CLI for this platform"
    try:
        done = subprocess.run([cli, "--version"], capture_output=True, timeout=60,
                              env={"PATH": os.defpath, "DISABLE_AUTOUPDATER": "1"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the bundled Claude Code CLI cannot run on this platform: {exc}"
    if done.returncode != 0:
        return ("the bundled Claude Code CLI cannot run on this platform (exit "
                f"{done.returncode})")
    return None
