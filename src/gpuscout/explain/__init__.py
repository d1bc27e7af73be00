"""Reading an error log: which known failure it holds, its cause, and this machine's fix
(`gpuscout doctor --explain`, and every failed run's record).

- known.toml: the failure classes (message patterns, versions, a public source each);
- table.py: loads it; machine.py: what the fixes need to know about this machine;
- remedies.py (memory_remedies.py for out of memory): one function per kind of fix;
- reader.py: matching a log, root cause first.
"""

from gpuscout.explain.machine import Context, Machine
from gpuscout.explain.reader import explain, explained

__all__ = ["Context", "Machine", "explain", "explained"]
