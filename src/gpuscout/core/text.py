"""Text from outside gpuscout (a script's argv and output, a folder's name, an environment, an
imported file) made safe to store and to show.

- Stored: Python gives bytes that are not UTF-8 to a program as lone surrogates (argv, os.environ
  and os.getcwd() decode with `surrogateescape`), and JSON cannot carry those: a record holding
  one could not be stored. They become U+FFFD, as undecodable output already does.
- Shown: control characters (ESC sequences that set a window title or clear the screen, a bell,
  a carriage return that hides the line before it) are what a terminal obeys, not text: a record's
  text is printed with them replaced by `\\xNN`, whatever file it came from.
"""

from __future__ import annotations

import re
from typing import Any

# C0 controls but tab and newline, DEL, and the C1 controls (0x80-0x9f: some terminals read 0x9b
# as ESC [).
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
SURROGATE = re.compile(r"[\ud800-\udfff]")


def storable(value: Any) -> Any:
    """`value` (str, or lists, tuples and dicts of them) with lone surrogates replaced."""
    if isinstance(value, str):
        return SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(storable(v) for v in value)
    return value


def has_controls(text: str) -> bool:
    return bool(CONTROL.search(text))


def printable(text: Any) -> str:
    """`text` as a terminal should show it: control characters as `\\xNN`, newlines kept."""
    text = str(text)
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text) if CONTROL.search(text) else text


def control_fields(value: Any, where: str = "") -> list[str]:
    """The fields (dotted paths) of a record's data whose text holds control characters."""
    if isinstance(value, str):
        return [where or "text"] if has_controls(value) else []
    if isinstance(value, dict):
        return [f for k, v in value.items() for f in control_fields(v, f"{where}.{k}" if where else str(k))]
    if isinstance(value, (list, tuple)):
        return [f for i, v in enumerate(value) for f in control_fields(v, f"{where}[{i}]")]
    return []
