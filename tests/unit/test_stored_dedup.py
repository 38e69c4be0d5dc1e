"""Stored dedup ids edited as text give what the ids parsed from the same JSON give.

The job hands the engine each vehicle's dedup ids as its state stores them
(``StoredDedup``), checked and extended by editing the JSON text. Compared here
with the plain form (``DedupState`` parsed from the same text) on random
sequences of ids, across the ``MAX_DEDUP_IDS`` bound: every answer and every
text written, byte for byte.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from vdoctor.memory.session import MAX_DEDUP_IDS, DedupState, StoredDedup

pytestmark = pytest.mark.unit

T0 = datetime(2026, 9, 1, tzinfo=UTC)

# Ids that JSON writes escaped, that are parts of one another, or that look like JSON around a key.
AWKWARD = [
    "", "e", "e-1", "e-10", "e-100", "1", "-1", "a,b", ",", ",,", ":", "::", ":1", ":1,", "a:", "a,", "a{", "{", "}",
    "}}", "{}", '"', '""', "\\", "\\\\", 'a"b', 'x":1,"y', 'x":1,"e-1', '"e-1', 'e-1"', "e-1:", "seen", '"seen"',
    "é", "ünïcödé", "\u2028", "\x7f", "😀", "\x00", "\n", "\t", "\x1f", "a b", " ", "e-1 ", "null", "[1]",
]  # fmt: skip


def _random_id(rng: random.Random, made: list[str]) -> str:
    roll = rng.random()
    if roll < 0.3 and made:
        return rng.choice(made)  # a replayed id
    if roll < 0.5:
        return rng.choice(AWKWARD)
    if roll < 0.6 and made:  # a prefix, suffix or extension of an id seen
        seen = rng.choice(made)
        return rng.choice([seen[1:], seen[:-1], seen + rng.choice(AWKWARD), rng.choice(AWKWARD) + seen])
    return f"e-{rng.randrange(10**6):06d}"


def _start(rng: random.Random, size: int, awkward: bool) -> DedupState:
    state = DedupState()
    while len(state.seen) < size:
        eid = f"e-{rng.randrange(10**7):07d}"
        state.seen[rng.choice(AWKWARD) + eid if awkward and rng.random() < 0.3 else eid] = rng.randrange(-10, 2**33)
    return state


def _both(rng: random.Random, near_full: int, awkward: bool) -> tuple[list[str], DedupState, StoredDedup]:
    """A random starting state (its ids, in order), parsed and as stored text."""
    size = rng.choice([0, 1, 2, 5, near_full, MAX_DEDUP_IDS, rng.randrange(MAX_DEDUP_IDS)])
    text = _start(rng, size, awkward=awkward).model_dump_json()
    return list(DedupState.model_validate_json(text).seen), DedupState.model_validate_json(text), StoredDedup(text)


@pytest.mark.parametrize("seed", range(40))
def test_stored_dedup_answers_and_writes_as_the_parsed_state(seed: int) -> None:
    rng = random.Random(seed)
    made, plain, stored = _both(rng, MAX_DEDUP_IDS - 3, awkward=seed % 3 == 0)
    for step in range(rng.choice([5, 20, 60])):
        eid = _random_id(rng, made)
        ts = T0 + timedelta(seconds=rng.randrange(-(10**6), 10**8))
        mark = rng.choice([None, 0, 0xFFFF, rng.randrange(1 << 16)])  # (an engine's, or a caller's without one)
        assert stored.check_and_add(eid, ts, mark) == plain.check_and_add(eid, ts, mark), (step, eid)
        # When the id was first processed, with what (a duplicate's time and mark tell a resend from a reused id).
        assert stored.seen_at(eid) == plain.seen_at(eid) is not None, (step, eid)
        probe = _random_id(rng, made)
        assert stored.seen_at(probe) == plain.seen_at(probe), (step, probe)
        made.append(eid)
        if rng.random() < 0.5:  # the state written and read back, as between two events
            text = stored.model_dump_json()
            assert text == plain.model_dump_json(), (step, eid)
            stored = StoredDedup(text)
    assert stored.model_dump_json() == plain.model_dump_json()
    assert stored.seen == plain.seen


def test_plain_texts_are_edited_not_parsed() -> None:
    """The fast path takes plain texts and ids: a busy vehicle's ids are not parsed."""
    text = _start(random.Random(1), MAX_DEDUP_IDS, awkward=False).model_dump_json()
    stored = StoredDedup(text)
    first = next(iter(DedupState.model_validate_json(text).seen))
    assert not stored.check_and_add(first, T0)
    assert stored.check_and_add("e-new", T0) and stored.check_and_add("é😀 :,{}", T0)
    assert not stored.check_and_add("e-new", T0)
    assert stored.seen_at("e-new") == int(T0.timestamp()) and stored.seen_at("e-none") is None
    assert stored._parsed is None  # noqa: SLF001
    assert f'"{first}":' not in stored.model_dump_json()  # the oldest went
    assert stored.check_and_add('e"q', T0) and stored._parsed is not None  # noqa: SLF001


def test_every_part_of_a_small_text_as_an_id() -> None:
    """Any substring of the stored text as the id: a match across ids or quotes would show here."""
    rng = random.Random(3)
    keys = [k + s for k in AWKWARD for s in ("", "1", ",")]
    for _ in range(120):
        start = DedupState(seen={k: rng.choice([1, 12, -3]) for k in rng.sample(keys, rng.choice([1, 2, 3]))})
        text = start.model_dump_json()
        for i in range(len(text)):
            for j in range(i, len(text) + 1):
                plain, stored = DedupState.model_validate_json(text), StoredDedup(text)
                assert stored.seen_at(text[i:j]) == plain.seen_at(text[i:j]), (text, text[i:j])
                assert stored.check_and_add(text[i:j], T0) == plain.check_and_add(text[i:j], T0), (text, text[i:j])
                assert stored.model_dump_json() == plain.model_dump_json()


def test_ids_counted_across_adds_up_to_the_bound() -> None:
    """One stored text taking several new ids in a row (its count kept) evicts as the parsed state does."""
    for size in (MAX_DEDUP_IDS - 3, MAX_DEDUP_IDS - 1, MAX_DEDUP_IDS, MAX_DEDUP_IDS + 2):
        text = _start(random.Random(size), size, awkward=False).model_dump_json()
        plain, stored = DedupState.model_validate_json(text), StoredDedup(text)
        for i in range(6):
            assert stored.check_and_add(f"n-{i}", T0) == plain.check_and_add(f"n-{i}", T0)
            assert stored.model_dump_json() == plain.model_dump_json(), (size, i)
        assert stored._parsed is None  # noqa: SLF001


# -- discard: an event that became a dead letter may be sent again ---------------------------------


@pytest.mark.parametrize("seed", range(40))
def test_stored_dedup_discards_as_the_parsed_state(seed: int) -> None:
    """Adds and discards mixed (an id discarded, added again, discarded twice): the same answers and texts."""
    rng = random.Random(1000 + seed)
    made, plain, stored = _both(rng, MAX_DEDUP_IDS - 1, awkward=seed % 3 == 0)
    for step in range(rng.choice([5, 20, 60])):
        eid = _random_id(rng, made)
        if rng.random() < 0.5:
            stored.discard(eid)
            plain.discard(eid)
            assert eid not in stored.seen, (step, eid)
        else:
            ts = T0 + timedelta(seconds=rng.randrange(-(10**6), 10**8))
            assert stored.check_and_add(eid, ts) == plain.check_and_add(eid, ts), (step, eid)
            made.append(eid)
        assert stored.model_dump_json() == plain.model_dump_json(), (step, eid)
        if rng.random() < 0.5:  # the state written and read back, as between two events
            stored = StoredDedup(stored.model_dump_json())
    assert stored.seen == plain.seen


def test_a_discarded_id_is_new_again_and_the_text_edited_not_parsed() -> None:
    stored = StoredDedup(DedupState().model_dump_json())
    for eid in ("a", "b", "c"):
        assert stored.check_and_add(eid, T0)
    # First, middle and last entry, then the only one left: the text is what pydantic writes for the rest.
    for eid, left in (("b", ["a", "c"]), ("c", ["a"]), ("a", [])):
        stored.discard(eid)
        assert stored.model_dump_json() == DedupState(seen=dict.fromkeys(left, int(T0.timestamp()))).model_dump_json()
    stored.discard("never-seen")
    assert stored.check_and_add("b", T0)  # new again
    assert stored._parsed is None  # noqa: SLF001


def test_an_entry_keeps_its_events_time_and_mark_and_one_from_before_the_marks_its_time() -> None:
    from vdoctor.memory.session import seen_value, split_seen

    second = int(T0.timestamp())
    for mark in (0, 1, 0xFFFF):
        assert split_seen(seen_value(T0, mark)) == (second, mark)
    assert split_seen(seen_value(T0, None)) == (second, None) == split_seen(second)
    stored = StoredDedup(DedupState().model_dump_json())
    assert stored.check_and_add("e-1", T0, 0xBEEF) and stored._parsed is None  # noqa: SLF001
    assert split_seen(stored.seen_at("e-1") or 0) == (second, 0xBEEF)
