"""The world outside the crash domain: receivers, their ledger, the clock."""
from __future__ import annotations

import datetime
import time
from datetime import timedelta

import pytest

from faultsim.world import (IdempotencyConflict, Ledger, ServiceError, World, WorldClock,
                            effect_difference, parse_instant)

START = "2026-10-01T09:00:00Z"
T0 = datetime.datetime(2026, 10, 1, 9, 0, tzinfo=datetime.timezone.utc)


def world(**services) -> World:
    w = World(clock=WorldClock(START))
    for name, kind in services.items():
        w.add_service(name, kind)
    return w


def outcomes(w: World, service: str | None = None) -> list[str]:
    return [e.outcome for e in w.ledger.attempts(service)]


# -- keyed ---------------------------------------------------------------------------------

def test_keyed_same_key_same_params_returns_first_result_and_applies_once():
    w = world(tickets="keyed")
    tickets = w.service("tickets")
    first = tickets.submit({"title": "a"}, key="k1")
    again = tickets.submit({"title": "a"}, key="k1")
    assert first == {"id": "tickets-0001", "title": "a"}
    assert again == first
    assert outcomes(w) == ["applied", "deduplicated"]
    assert len(w.ledger.applied("tickets")) == 1
    assert w.ledger.duplicates() == {}
    assert w.ledger.entries[1].result == first


def test_keyed_params_compare_regardless_of_dict_order():
    w = world(tickets="keyed")
    tickets = w.service("tickets")
    tickets.submit({"title": "a", "body": "b"}, key="k1")
    tickets.submit({"body": "b", "title": "a"}, key="k1")
    assert outcomes(w) == ["applied", "deduplicated"]


def test_keyed_different_keys_are_different_effects():
    w = world(tickets="keyed")
    tickets = w.service("tickets")
    one = tickets.submit({"title": "a"}, key="k1")
    two = tickets.submit({"title": "a"}, key="k2")
    assert one["id"] != two["id"]
    assert outcomes(w) == ["applied", "applied"]
    assert w.ledger.duplicates() == {'tickets.submit({"title":"a"})': 2}


def test_keyed_same_key_different_params_is_a_conflict():
    w = world(tickets="keyed")
    tickets = w.service("tickets")
    first = tickets.submit({"title": "a"}, key="k1")
    with pytest.raises(IdempotencyConflict, match="k1"):
        tickets.submit({"title": "b"}, key="k1")
    assert issubclass(IdempotencyConflict, ServiceError)
    assert outcomes(w) == ["applied", "conflict"]
    assert w.ledger.entries[1].params == {"title": "b"} and w.ledger.entries[1].result is None
    assert tickets.lookup_key("k1") == first  # the conflict changed nothing


def test_keyed_requires_a_key():
    w = world(tickets="keyed")
    with pytest.raises(ServiceError, match="idempotency key is required"):
        w.service("tickets").submit({"title": "a"}, key="")
    assert w.ledger.entries == []


def test_keyed_key_is_forgotten_after_retention_and_a_repeat_applies_again():
    w = world(payments="keyed")
    payments = w.service("payments")
    params = {"customer": "CUST-17", "amount_cents": -2599}
    payments.submit(params, key="refund-1")
    w.clock.advance(timedelta(hours=24))
    again = payments.submit(params, key="refund-1")
    assert again["id"] == "payments-0002"
    assert outcomes(w) == ["applied", "applied"]
    assert w.ledger.duplicates() == {
        'payments.submit({"amount_cents":-2599,"customer":"CUST-17"})': 2}
    assert w.ledger.duplicates("payments") == w.ledger.duplicates()
    assert w.ledger.duplicates("tickets") == {}


def test_keyed_key_within_retention_still_deduplicates():
    w = world(payments="keyed")
    payments = w.service("payments")
    payments.submit({"a": 1}, key="k")
    w.clock.advance(timedelta(hours=23, minutes=59, seconds=59))
    payments.submit({"a": 1}, key="k")
    assert outcomes(w) == ["applied", "deduplicated"]


def test_lookup_key_inside_and_outside_the_window():
    w = world(tickets="keyed")
    tickets = w.service("tickets")
    assert tickets.lookup_key("k1") is None
    first = tickets.submit({"title": "a"}, key="k1")
    w.clock.advance(timedelta(hours=23))
    assert tickets.lookup_key("k1") == first
    w.clock.advance(timedelta(hours=1))
    assert tickets.lookup_key("k1") is None
    assert outcomes(w) == ["applied"]  # lookups are not ledger attempts


def test_custom_key_retention():
    w = World(clock=WorldClock(START))
    tickets = w.add_service("tickets", "keyed", key_retention=timedelta(minutes=5))
    tickets.submit({"title": "a"}, key="k1")
    w.clock.advance(timedelta(minutes=5))
    assert tickets.lookup_key("k1") is None


def test_keyed_result_cannot_be_changed_through_the_returned_value():
    w = world(tickets="keyed")
    tickets = w.service("tickets")
    first = tickets.submit({"title": "a"}, key="k1")
    first["title"] = "mutated"
    assert tickets.lookup_key("k1") == {"id": "tickets-0001", "title": "a"}
    assert tickets.submit({"title": "a"}, key="k1")["title"] == "a"


# -- queryable -----------------------------------------------------------------------------

def test_queryable_apply_then_query_returns_the_fields():
    w = world(records="queryable")
    records = w.service("records")
    out = records.apply("CUST-17", {"segment": "at-risk"})
    assert out == {"record_id": "CUST-17", "segment": "at-risk"}
    records.apply("CUST-17", {"refund": "issued"})
    assert records.query("CUST-17") == {"record_id": "CUST-17", "segment": "at-risk",
                                        "refund": "issued"}
    assert outcomes(w) == ["applied", "applied", "found"]
    assert w.ledger.entries[0].params == {"record_id": "CUST-17",
                                          "fields": {"segment": "at-risk"}}


def test_queryable_starts_from_its_records():
    w = World(clock=WorldClock(START))
    records = w.add_service("records", "queryable", records={"R": {"status": "open"}})
    assert records.query("R") == {"record_id": "R", "status": "open"}


def test_queryable_query_of_missing_record_is_none_and_not_found():
    w = world(records="queryable")
    assert w.service("records").query("NOPE") is None
    (entry,) = w.ledger.entries
    assert (entry.op, entry.outcome, entry.params, entry.applied) == (
        "query", "not_found", {"record_id": "NOPE"}, False)


def test_queryable_setting_the_values_a_record_holds_is_no_second_effect():
    # a write sets the record's fields: a repeat that leaves it as it was changes nothing
    # (issue 51: it used to count as the effect applied twice)
    w = world(records="queryable")
    records = w.service("records")
    records.apply("R", {"status": "done"})
    records.apply("R", {"status": "done"})
    assert outcomes(w) == ["applied", "unchanged"]
    assert w.ledger.duplicates() == {} and len(w.ledger.applied()) == 1


@pytest.mark.parametrize("writes", [
    [{"status": "done"}, {"status": "done", "by": "run 2"}],  # another value beside it
    [{"status": "done"}, {"status": "open"}, {"status": "done"}],  # set back: a change
])
def test_queryable_a_set_that_changes_the_record_is_applied(writes):
    w = world(records="queryable")
    for fields in writes:
        w.service("records").apply("R", fields)
    assert outcomes(w) == ["applied"] * len(writes)


def test_queryable_creating_a_record_is_applied_even_with_no_fields():
    w = world(records="queryable")
    w.service("records").apply("NEW", {})
    assert outcomes(w) == ["applied"]


def test_queryable_apply_result_does_not_alias_the_stored_record():
    # The service lives outside the agent: nothing the agent does to a returned value may
    # change the service's state (query(), lookup_key() and read() all return copies).
    w = world(records="queryable")
    records = w.service("records")
    out = records.apply("R", {"tags": ["billing"]})
    out["tags"].append("changed by the caller")
    assert records.query("R")["tags"] == ["billing"]


def test_queryable_records_are_copied_from_the_caller():
    # Worlds built from one Scenario share its records: each must get its own copy.
    shared = {"R": {"tags": ["billing"]}}
    w = World(clock=WorldClock(START))
    records = w.add_service("records", "queryable", records=shared)
    shared["R"]["tags"].append("changed after the world was built")
    assert records.query("R")["tags"] == ["billing"]


# -- blind ---------------------------------------------------------------------------------

def test_blind_every_send_is_a_new_effect():
    w = world(email="blind")
    email = w.service("email")
    mail = {"to": "dana@example.com", "subject": "Refunded"}
    one, two = email.send(mail), email.send(mail)
    assert one == {"id": "email-0001"} and two == {"id": "email-0002"}
    assert outcomes(w) == ["applied", "applied"]
    assert w.ledger.duplicates() == {
        'email.send({"subject":"Refunded","to":"dana@example.com"})': 2}


def test_blind_different_sends_are_not_duplicates():
    w = world(email="blind")
    w.service("email").send({"to": "a"})
    w.service("email").send({"to": "b"})
    assert w.ledger.duplicates() == {}
    assert sum(w.ledger.effect_counts().values()) == 2


# -- readonly ------------------------------------------------------------------------------

def test_readonly_read_returns_data_and_applies_nothing():
    w = World(clock=WorldClock(START))
    orders = w.add_service("orders", "readonly",
                           records={"ORD-1": {"customer": "CUST-09", "items": [1, 2]}})
    value = orders.read("ORD-1")
    assert value == {"customer": "CUST-09", "items": [1, 2]}
    value["items"].append(3)
    assert orders.read("ORD-1")["items"] == [1, 2]
    assert orders.read("ORD-404") is None
    assert outcomes(w) == ["read", "read", "not_found"]
    assert w.ledger.applied() == []
    assert w.ledger.effect_counts() == {}


# -- ledger --------------------------------------------------------------------------------

def test_ledger_entries_carry_the_incarnation_and_world_time():
    w = world(email="blind", tickets="keyed")
    w.service("email").send({"n": 0})
    assert w.begin_incarnation() == 1
    w.clock.advance(timedelta(minutes=30))
    w.service("tickets").submit({"t": 1}, key="k")
    assert w.begin_incarnation() == 2
    w.service("tickets").submit({"t": 1}, key="k")
    assert [(e.seq, e.incarnation) for e in w.ledger.entries] == [(1, 0), (2, 1), (3, 2)]
    assert [e.at for e in w.ledger.entries] == [
        "2026-10-01T09:00:00+00:00", "2026-10-01T09:30:00+00:00", "2026-10-01T09:30:00+00:00"]
    assert [e.outcome for e in w.ledger.by_incarnation(2)] == ["deduplicated"]
    assert w.ledger.entries[1].describe() == \
        '#2 inc1 tickets.submit key=k {"t":1} -> applied'


def test_ledger_params_are_a_snapshot():
    w = world(email="blind")
    params = {"to": ["a"]}
    w.service("email").send(params)
    params["to"].append("b")
    assert w.ledger.entries[0].params == {"to": ["a"]}


def test_effect_difference_reports_extra_and_missing_effects():
    expected, actual = world(email="blind", tickets="keyed"), world(email="blind",
                                                                    tickets="keyed")
    for w in (expected, actual):
        w.service("email").send({"to": "a"})
        w.service("tickets").submit({"t": 1}, key="k1")
    expected.service("tickets").submit({"t": 2}, key="k2")
    actual.service("email").send({"to": "a"})
    actual.service("email").send({"to": "a"})
    diff = effect_difference(expected.ledger, actual.ledger)
    assert diff == {"extra": {'email.send({"to":"a"})': 2},
                    "missing": {'tickets.submit({"t":2})': 1}}
    assert effect_difference(expected.ledger, expected.ledger) == {"extra": {}, "missing": {}}


def test_effect_difference_ignores_attempts_that_applied_nothing():
    a, b = Ledger(), world(tickets="keyed", records="queryable")
    b.service("records").query("X")
    assert effect_difference(a, b.ledger) == {"extra": {}, "missing": {}}


# -- events --------------------------------------------------------------------------------

def test_effect_applied_event_carries_the_entry_and_unsubscribe_stops_it():
    w = world(email="blind", tickets="keyed")
    seen = []
    unsubscribe = w.subscribe(lambda kind, **info: seen.append((kind, info)))
    w.service("email").send({"to": "a"})
    (kind, info), = seen
    assert kind == "effect.applied"
    assert info["entry"] is w.ledger.entries[0]
    w.service("tickets").submit({"t": 1}, key="k")
    w.service("tickets").submit({"t": 1}, key="k")
    assert [k for k, _ in seen] == ["effect.applied", "effect.applied", "effect.deduplicated"]
    unsubscribe()
    w.service("email").send({"to": "b"})
    w.begin_incarnation()
    assert len(seen) == 3


def test_incarnation_start_is_emitted():
    w = world()
    seen = []
    w.subscribe(lambda kind, **info: seen.append((kind, info)))
    w.begin_incarnation()
    assert seen == [("incarnation.start", {"incarnation": 1})]


def test_a_listener_that_raises_leaves_the_effect_applied():
    w = world(email="blind")

    class Killed(BaseException):
        pass

    def kill(kind, **info):
        raise Killed

    w.subscribe(kill)
    with pytest.raises(Killed):
        w.service("email").send({"to": "a"})
    assert [e.outcome for e in w.ledger.entries] == ["applied"]


def test_model_requests_are_tagged_with_the_world_incarnation():
    from faultsim.model import Script, Turn

    w = World(clock=WorldClock(START), scripts=[Script(task="t", turns=(Turn(final="ok"),))])
    kinds = []
    w.subscribe(lambda kind, **info: kinds.append(kind))
    w.begin_incarnation()
    w.begin_incarnation()
    w.model.client().messages.create(model="m", max_tokens=5,
                                      messages=[{"role": "user", "content": "t"}])
    assert [r.incarnation for r in w.model.requests] == [2]
    assert kinds[-2:] == ["incarnation.start", "model.response"]


# -- services ------------------------------------------------------------------------------

def test_unknown_receiver_kind_is_a_value_error_naming_it():
    w = world()
    with pytest.raises(ValueError, match="unknown receiver kind 'mailbox'") as info:
        w.add_service("inbox", "mailbox")
    assert "'inbox'" in str(info.value)
    assert w.services == {}


def test_service_defined_twice_and_unknown_service():
    w = world(email="blind")
    with pytest.raises(ValueError, match="defined twice"):
        w.add_service("email", "keyed")
    with pytest.raises(KeyError, match="it has: email"):
        w.service("sms")


def test_receivers_have_their_kind():
    w = world(a="keyed", b="queryable", c="blind", d="readonly")
    assert {n: s.kind for n, s in w.services.items()} == {
        "a": "keyed", "b": "queryable", "c": "blind", "d": "readonly"}


# -- clock ---------------------------------------------------------------------------------

def test_parse_instant_accepts_z_naive_and_offsets():
    assert parse_instant("2026-10-01T09:00:00Z") == T0
    assert parse_instant("2026-10-01T11:00:00+02:00") == T0
    assert parse_instant(datetime.datetime(2026, 10, 1, 9)) == T0
    assert parse_instant(T0).tzinfo == datetime.timezone.utc


def test_clock_outside_frozen_answers_from_its_state():
    clock = WorldClock(START)
    assert clock.now() == T0 and not clock.is_frozen
    assert clock.advance(90) == T0 + timedelta(seconds=90)
    assert clock.timestamp() == (T0 + timedelta(seconds=90)).timestamp()


def test_frozen_clock_drives_process_time_and_advance_moves_both():
    clock = WorldClock(START)
    real_time = time.time
    with clock.frozen() as frozen:
        assert frozen is clock and clock.is_frozen
        assert datetime.datetime.now(datetime.timezone.utc) == clock.now() == T0
        assert time.time() == clock.timestamp() == T0.timestamp()
        clock.advance(timedelta(hours=2))
        assert clock.now() == T0 + timedelta(hours=2)
        assert datetime.datetime.now(datetime.timezone.utc) == clock.now()
        assert time.time() == clock.timestamp()
        with clock.frozen():  # re-entrant
            clock.advance(timedelta(minutes=1))
        assert clock.is_frozen
        assert time.time() == (T0 + timedelta(hours=2, minutes=1)).timestamp()
    assert not clock.is_frozen
    assert clock.now() == T0 + timedelta(hours=2, minutes=1)
    assert time.time is real_time
    assert type(datetime.datetime.now()) is datetime.datetime
    now = datetime.datetime.now(datetime.timezone.utc)
    assert now != clock.now()


def test_clock_cannot_go_back():
    clock = WorldClock(START)
    with pytest.raises(ValueError, match="cannot go back"):
        clock.advance(timedelta(seconds=-1))
    with clock.frozen():
        with pytest.raises(ValueError):
            clock.advance(-5)
        assert clock.now() == T0
    assert clock.now() == T0


def test_refreezing_resumes_from_the_advanced_instant():
    clock = WorldClock(START)
    with clock.frozen():
        clock.advance(timedelta(days=1))
    clock.advance(timedelta(hours=1))
    with clock.frozen():
        assert datetime.datetime.now(datetime.timezone.utc) == T0 + timedelta(days=1, hours=1)


def test_a_clock_that_fails_to_freeze_leaves_time_running(monkeypatch):
    """freezegun patches `datetime` before it scans every module: a module whose lazy
    attribute fails there (3.13's unittest imports one from its __getattr__) must not leave
    the process frozen for everything after."""
    import sys
    import types

    lazy = types.ModuleType("faultsim_test_lazy")

    def __getattr__(name):
        raise FileNotFoundError(f"no {name}")

    lazy.__getattr__ = __getattr__
    lazy.__dir__ = lambda: ["later"]
    monkeypatch.setitem(sys.modules, lazy.__name__, lazy)
    real = datetime.datetime
    with pytest.raises(FileNotFoundError):
        with WorldClock(START).frozen():
            pass
    assert datetime.datetime is real and time.time() > 1.7e9



def test_a_world_copied_or_sent_while_frozen_keeps_the_same_state_text():
    # The executors copy a world at a kill point, and forked children send their verdicts'
    # worlds, while time is frozen. freezegun's picklers turned each stored datetime into a
    # FakeDatetime there: equal instants, but the state's text (what convergence and the
    # memo compare) differed from the clean run's and every cut was refused.
    import copy
    import os

    from faultsim.pipeline.incarnation import stores_state, world_signature
    from faultsim.real import wire

    original = world(tickets="keyed")
    original.service("tickets").submit({"title": "a"}, key="k1")  # stored with its instant
    read, write = os.pipe()
    try:
        with original.clock.frozen():
            copied = copy.deepcopy(original)
            wire.send(write, original)
            sent = wire.receive(read)
            assert type(copy.deepcopy(T0)) is not type(T0)  # freezegun's, for the agent
    finally:
        os.close(read)
        os.close(write)
    for other in (copied, sent):
        assert stores_state(other) == stores_state(original)
        assert world_signature(other) == world_signature(original)
