"""Evolution errors keep their structured attributes through pickling."""
from __future__ import annotations

import pickle

import pytest

from evolution.exceptions import (
    ApplyError, EvolutionError, EvolutionViolation, PolicyConfigError, UnsupportedSchemaError,
)

ERRORS = [
    (UnsupportedSchemaError("recursive", schema_name="a.Node", path=("x", "next")),
     {"schema_name": "a.Node", "path": ("x", "next"), "reason": "recursive"}),
    (PolicyConfigError("bad mode", key="new_column", value="grow", topic="t.*"),
     {"key": "new_column", "value": "grow", "topic": "t.*"}),
    (EvolutionViolation("narrowing", table="db.t", column="id", kind="type_change"),
     {"table": "db.t", "column": "id", "kind": "type_change"}),
    (ApplyError("conflict", table="db.t"), {"table": "db.t", "column": None}),
]


@pytest.mark.parametrize("err,attrs", ERRORS, ids=[type(e).__name__ for e, _ in ERRORS])
def test_pickle_roundtrip(err, attrs) -> None:
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is type(err)
    assert str(again) == str(err)
    assert isinstance(again, EvolutionError)
    for key, value in attrs.items():
        assert getattr(again, key) == value
    assert again.transient == type(err).transient


def test_transient_flags() -> None:
    assert EvolutionError.transient is False
    assert UnsupportedSchemaError.transient is False
    assert PolicyConfigError.transient is False
    assert EvolutionViolation.transient is False
    assert ApplyError.transient is True


def test_messages_name_the_subject() -> None:
    assert "a.Node" in str(ERRORS[0][0]) and "x.next" in str(ERRORS[0][0])
    assert "db.t.id" in str(ERRORS[2][0])
