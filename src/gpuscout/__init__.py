"""gpuscout: trustworthy training benchmarks for TensorFlow/Keras on NVIDIA GPUs.

The parent process (this package's CLI and library) never imports TensorFlow, JAX or Keras:
every measurement runs in a child process (see ``gpuscout.child.worker``).
"""

from gpuscout.core.versions import METHODOLOGY_VERSION, SCHEMA_VERSION, __version__  # noqa: F401  (the public names)


def load_ipython_extension(ipython) -> None:
    """`%load_ext gpuscout`: the %gpuscout and %%gpuscout magics (gpuscout.notebook.magics)."""
    from gpuscout.notebook.magics import load

    load(ipython)


def __getattr__(name: str):
    # `from gpuscout import InputSpec` in a user's model file, and the notebook API, without
    # importing either eagerly here (a watched script imports this package too).
    if name == "InputSpec":
        from gpuscout.workloads.user import InputSpec

        return InputSpec
    if name in ("watching", "callback"):  # the in-process watch: a `with` block, or one fit's callback
        import gpuscout.notebook.live

        return getattr(gpuscout.notebook.live, name)
    if name in ("show", "doctor", "report", "compare"):
        import gpuscout.notebook

        return getattr(gpuscout.notebook, name)
    raise AttributeError(f"module 'gpuscout' has no attribute {name!r}")
