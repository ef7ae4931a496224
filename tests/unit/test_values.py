"""``values.quick_init``: a frozen dataclass's faster ``__init__`` makes the same values."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from syncer.values import quick_init


def _factory() -> list[int]:
    return [7]


@dataclass(frozen=True, slots=True)
class Plain:
    a: int
    b: str
    c: int = 3
    d: list[int] = field(default_factory=_factory, compare=False)


@quick_init
@dataclass(frozen=True, slots=True)
class Quick:
    a: int
    b: str
    c: int = 3
    d: list[int] = field(default_factory=_factory, compare=False)


def fields_of(value: object) -> tuple[object, ...]:
    return tuple(getattr(value, f.name) for f in dataclasses.fields(value))  # type: ignore[arg-type]


def test_the_same_values_by_position_keyword_and_default() -> None:
    for args, kwargs in [((1, "x"), {}), ((1, "x", 4), {}), ((), {"b": "y", "a": 2, "d": [1]})]:
        quick, plain = Quick(*args, **kwargs), Plain(*args, **kwargs)
        assert fields_of(quick) == fields_of(plain)
        assert repr(quick) == repr(plain).replace("Plain", "Quick")
    assert Quick(1, "x").d is not Quick(1, "x").d  # a new one from the factory each time


def test_still_frozen_compared_and_hashed() -> None:
    quick = Quick(1, "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        quick.a = 2  # type: ignore[misc]
    assert quick == Quick(1, "x", d=[9]) and quick != Quick(1, "y")
    assert hash(quick) == hash(Quick(1, "x"))
    assert dataclasses.replace(quick, c=5) == Quick(1, "x", 5)


def test_a_missing_argument_is_refused_as_by_the_generated_init() -> None:
    with pytest.raises(TypeError):
        Quick(1)  # type: ignore[call-arg]


def test_classes_it_would_change_the_meaning_of_are_refused() -> None:
    @dataclass(slots=True)
    class Mutable:
        a: int

    @dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclass(frozen=True, slots=True, kw_only=True)
    class KeywordOnly:
        a: int

    for cls in (Mutable, Checked, KeywordOnly):
        with pytest.raises(TypeError):
            quick_init(cls)
