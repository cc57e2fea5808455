"""The fake Claude: scripted turns served through the real anthropic SDK.

Part of the simulated world (layer 2): may import the bottom layer and `world/`, never
the pipeline, a backend or a front end."""
from .endpoint import ModelEndpoint, serve
from .fake import FAKE_API_KEY, FakeClaude, RequestRecord, place
from .script import ApiFault, Script, ToolCall, Turn, tool_use_id
from .validate import InvalidRequest, validate_request

__all__ = ["ApiFault", "FAKE_API_KEY", "FakeClaude", "InvalidRequest", "ModelEndpoint",
           "RequestRecord", "Script", "ToolCall", "Turn", "place", "serve",
           "tool_use_id", "validate_request"]
