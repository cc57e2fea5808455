"""The checkpointer seen by faultsim: every call is an event, hence a kill point."""
from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Iterator, Sequence

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig


class WorldSaver(InMemorySaver):
    """LangGraph's InMemorySaver kept in faultsim's world: it stands for a checkpoint
    database outside the agent's process, so it survives the agent's crashes."""

    def faultsim_signature(self) -> str:
        """What a resumed run can read from it (the world's signature includes it)."""
        parts = repr((sorted((k, sorted(v.items())) for k, v in self.storage.items()),
                      sorted((k, sorted(v.items())) for k, v in self.writes.items()),
                      sorted(self.blobs.items())))
        return hashlib.blake2b(parts.encode(), digest_size=12).hexdigest()


class WatchedSaver(BaseCheckpointSaver):
    """Wraps any BaseCheckpointSaver. Each call that reaches the store is reported after it
    returns (`lg.read`, `lg.put`, `lg.writes`), so a kill can land before or after it; a
    killed incarnation can no longer reach the store."""

    def __init__(self, inner: BaseCheckpointSaver, *, report: Callable[[str, str], None],
                 guard: Callable[[str], None]) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner
        self._report, self._guard = report, guard
        # whether the inner saver's put_writes takes `task_path` (savers written before the
        # parameter don't), asked as LangGraph asks it (pregel._checkpoint's helper, which
        # 1.2.11 and earlier 1.2 releases lack)
        import inspect

        self._task_path = inspect.signature(inner.put_writes).parameters.get(
            "task_path") is not None
        self._atask_path = inspect.signature(inner.aput_writes).parameters.get(
            "task_path") is not None

    @property
    def config_specs(self) -> list:
        return self.inner.config_specs

    def get_tuple(self, config: "RunnableConfig") -> Any:
        self._guard("get_tuple")
        found = self.inner.get_tuple(config)
        self._report("lg.read", "get_tuple:" + ("found" if found else "none"))
        return found

    def list(self, config: "RunnableConfig | None", *, filter: dict | None = None,
             before: "RunnableConfig | None" = None, limit: int | None = None) -> Iterator:
        self._guard("list")
        items = list(self.inner.list(config, filter=filter, before=before, limit=limit))
        self._report("lg.read", f"list:{len(items)}")
        return iter(items)

    def put(self, config: "RunnableConfig", checkpoint: Any, metadata: Any,
            new_versions: Any) -> "RunnableConfig":
        self._guard("put")
        saved = self.inner.put(config, checkpoint, metadata, new_versions)
        self._report("lg.put", f"step {metadata.get('step')} ({metadata.get('source')})")
        return saved

    def put_writes(self, config: "RunnableConfig", writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str = "") -> None:
        self._guard("put_writes")
        if self._task_path:
            self.inner.put_writes(config, writes, task_id, task_path)
        else:
            self.inner.put_writes(config, writes, task_id)
        channels = ",".join(sorted({c for c, _ in writes}))
        self._report("lg.writes", channels[:60])

    # the same, for a graph run with ainvoke / astream (an AsyncSqliteSaver, or the
    # in-memory saver's async methods)
    async def aget_tuple(self, config: "RunnableConfig") -> Any:
        self._guard("get_tuple")
        found = await self.inner.aget_tuple(config)
        self._report("lg.read", "get_tuple:" + ("found" if found else "none"))
        return found

    async def alist(self, config: "RunnableConfig | None", *, filter: dict | None = None,
                    before: "RunnableConfig | None" = None, limit: int | None = None
                    ) -> AsyncIterator:
        self._guard("list")
        items = [i async for i in self.inner.alist(config, filter=filter, before=before,
                                                   limit=limit)]
        self._report("lg.read", f"list:{len(items)}")
        for item in items:
            yield item

    async def aput(self, config: "RunnableConfig", checkpoint: Any, metadata: Any,
                   new_versions: Any) -> "RunnableConfig":
        self._guard("put")
        saved = await self.inner.aput(config, checkpoint, metadata, new_versions)
        self._report("lg.put", f"step {metadata.get('step')} ({metadata.get('source')})")
        return saved

    async def aput_writes(self, config: "RunnableConfig", writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:
        self._guard("put_writes")
        if self._atask_path:
            await self.inner.aput_writes(config, writes, task_id, task_path)
        else:
            await self.inner.aput_writes(config, writes, task_id)
        channels = ",".join(sorted({c for c, _ in writes}))
        self._report("lg.writes", channels[:60])

    async def aget_delta_channel_history(self, *, config: "RunnableConfig",
                                         channels: Sequence[str]) -> Any:
        self._guard("get_delta_channel_history")
        found = await self.inner.aget_delta_channel_history(config=config, channels=channels)
        self._report("lg.read", "delta_history")
        return found

    async def adelete_thread(self, thread_id: str) -> None:
        self._guard("delete_thread")
        await self.inner.adelete_thread(thread_id)
        self._report("lg.put", "delete_thread")

    def get_next_version(self, current: Any, channel: Any) -> Any:
        return self.inner.get_next_version(current, channel)

    def get_delta_channel_history(self, *, config: "RunnableConfig", channels: Sequence[str]
                                  ) -> Any:
        self._guard("get_delta_channel_history")
        found = self.inner.get_delta_channel_history(config=config, channels=channels)
        self._report("lg.read", "delta_history")
        return found

    def delete_thread(self, thread_id: str) -> None:
        self._guard("delete_thread")
        self.inner.delete_thread(thread_id)
        self._report("lg.put", "delete_thread")

    def __getattr__(self, name: str) -> Any:  # anything else a saver offers, unwatched
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)
