"""The failure classes of known.toml, compiled once."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class FailureClass:
    code: str
    title: str
    patterns: tuple[re.Pattern, ...]
    cause: str
    fixer: str
    seen_in: str
    source: str
    echo_of: tuple[str, ...] = ()


@lru_cache(maxsize=1)
def failure_classes() -> tuple[FailureClass, ...]:
    text = resources.files("gpuscout.explain").joinpath("known.toml").read_text(encoding="utf-8")
    return tuple(
        FailureClass(
            code=e["code"],
            title=e["title"],
            patterns=tuple(re.compile(p) for p in e["patterns"]),
            cause=e["cause"],
            fixer=e["fixer"],
            seen_in=e["seen_in"],
            source=e["source"],
            echo_of=tuple(e.get("echo_of", ())),
        )
        for e in tomllib.loads(text)["failure"]
    )
