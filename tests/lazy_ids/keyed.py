"""Draws a key at import time, as opentelemetry.context.create_key does."""
from uuid import uuid4

KEY = f"current-span-{uuid4()}"
