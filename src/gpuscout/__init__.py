"""gpuscout: trustworthy training benchmarks for TensorFlow/Keras on NVIDIA GPUs.

The parent process (this package's CLI and library) never imports TensorFlow, JAX or Keras:
every measurement runs in a child process (see ``gpuscout.child.worker``).
"""

__version__ = "0.1.0"

# Bump whenever the way of measuring changes (docs/methodology.md); records of another
# methodology are never mixed in comparisons.
METHODOLOGY_VERSION = 1


def __getattr__(name: str):
    # `from gpuscout import InputSpec` in a user's model file, without importing it eagerly here.
    if name == "InputSpec":
        from gpuscout.workloads.user import InputSpec

        return InputSpec
    raise AttributeError(f"module 'gpuscout' has no attribute {name!r}")
