"""The world's clock: one frozen timeline shared by the agent and the services.

Driven through freezegun so that the agent's own `time.time()` / `datetime.now()` see
the same instant as the services' key retention, and so that downtime between a crash
and a resume is one `advance()` instead of a real wait.
"""
from __future__ import annotations

import copyreg
import datetime as _dt
from contextlib import contextmanager
from typing import Any, Iterator

import freezegun
import freezegun.api as _unfrozen  # freezegun patches every module's names but its own

UTC = _dt.timezone.utc


@contextmanager
def faithful_copies() -> Iterator[None]:
    """faultsim's own copies and messages (a world copied at a kill point, a verdict sent
    by a forked child) keep each `datetime` the class it was. While frozen, freezegun
    registers picklers that turn every real `datetime` and `date` deep-copied or pickled
    into its FakeDatetime / FakeDate (by name a real one cannot be pickled then: the name
    `datetime.datetime` is the fake's): equal instants, other texts. A world copied while
    frozen stored `FakeDatetime(...)` where the clean run's stored `datetime.datetime(...)`,
    its state's text (what convergence and the memo compare) differed, and cuts the clean
    run allowed were refused. The agent's own copies keep freezegun's behaviour: this is
    entered only around faultsim's."""
    table = copyreg.dispatch_table
    real_dt, real_d = _unfrozen.real_datetime, _unfrozen.real_date
    if table.get(real_dt) is not _unfrozen.pickle_fake_datetime:  # not frozen
        yield
        return
    # freezegun registers both picklers at once (and removes both when it stops)
    table[real_dt], table[real_d] = _reduce_datetime, _reduce_date
    try:
        yield
    finally:
        table[real_dt], table[real_d] = _unfrozen.pickle_fake_datetime, _unfrozen.pickle_fake_date


def _reduce_datetime(value: _dt.datetime) -> tuple:
    return _real_datetime, (value.year, value.month, value.day, value.hour, value.minute,
                            value.second, value.microsecond, value.tzinfo, value.fold)


def _reduce_date(value: _dt.date) -> tuple:
    return _real_date, (value.year, value.month, value.day)


def _real_datetime(*fields: Any) -> _dt.datetime:
    *parts, fold = fields
    return _unfrozen.real_datetime(*parts, fold=fold)


def _real_date(*fields: int) -> _dt.date:
    return _unfrozen.real_date(*fields)


def parse_instant(value: str | _dt.datetime) -> _dt.datetime:
    """An aware UTC datetime from an ISO-8601 string or a datetime."""
    if isinstance(value, str):
        value = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


# Clocks that stay real under a frozen one: pytest's own (`_pytest.timing`, the test
# durations it reports). A fixture that holds faultsim's frozen clock from a test's set-up
# on would otherwise report that set-up as lasting since 1970.
REAL_CLOCKS = ["_pytest.timing"]


def freeze(at: Any) -> Any:
    """A freezegun freezer at `at` (not started), as faultsim freezes process time."""
    return freezegun.freeze_time(at, real_asyncio=True, ignore=REAL_CLOCKS)


class WorldClock:
    """Deterministic time. Outside `frozen()` it still answers `now()` from its own state."""

    def __init__(self, start: str | _dt.datetime = "2026-01-05T09:00:00Z") -> None:
        self._now = parse_instant(start)
        self._factory = None  # freezegun's FrozenDateTimeFactory while frozen

    def now(self) -> _dt.datetime:
        if self._factory is not None:
            return self._factory().replace(tzinfo=UTC)
        return self._now

    def timestamp(self) -> float:
        return self.now().timestamp()

    def advance(self, delta: _dt.timedelta | float) -> _dt.datetime:
        """Move time forward (downtime, retention windows). Never backwards."""
        if not isinstance(delta, _dt.timedelta):
            delta = _dt.timedelta(seconds=float(delta))
        if delta < _dt.timedelta(0):
            raise ValueError(f"the world clock cannot go back ({delta})")
        if self._factory is not None:
            self._factory.tick(delta)
        self._now = self._now + delta
        return self.now()

    def attach(self, factory) -> None:
        """Drive an already running freezegun factory (one freeze for many worlds: each
        start of freezegun rescans every module)."""
        factory.move_to(self._now.replace(tzinfo=None))
        self._factory = factory

    def detach(self) -> None:
        self._now = self.now()
        self._factory = None

    def __deepcopy__(self, memo: dict) -> "WorldClock":
        return WorldClock(self.now())

    def __getstate__(self) -> dict:
        # A pickled clock (sent between processes) keeps the instant, not freezegun's factory.
        return {"_now": self.now(), "_factory": None}

    @property
    def is_frozen(self) -> bool:
        return self._factory is not None

    @contextmanager
    def frozen(self) -> Iterator["WorldClock"]:
        """Freeze process time at the world's instant for the duration of the block.

        Entered once per run, not per incarnation: each freezegun start rescans every
        loaded module (~17 ms with anthropic imported).
        """
        if self._factory is not None:  # re-entrant: already frozen by an outer block
            yield self
            return
        freezer = freeze(self._now.replace(tzinfo=None))
        try:
            self._factory = freezer.start()
        except BaseException:
            # start() patches `datetime` first, then scans every module: one that fails
            # (a lazy import in a module's __getattr__, as 3.13's unittest has) would leave
            # the clock frozen for the rest of the process
            freezer.stop()
            raise
        try:
            yield self
        finally:
            self._now = self.now()
            self._factory = None
            freezer.stop()
