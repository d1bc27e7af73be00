"""`python -m gpuscout.measure.notebook_runner NOTEBOOK`: a notebook run top to bottom in a fresh kernel, as
`python train.py` runs a script. What `gpuscout watch train.ipynb` and `tune train.ipynb` start
(measure/command.py), under the same instrumentation as a script.

nbclient (Jupyter's own executor, the one `jupyter nbconvert --execute` uses) starts the kernel
the notebook names and runs its code cells in order, in the notebook's folder. The kernel
inherits this process's environment, so the instrumentation's sitecustomize loads in it; its
event pipe is passed on explicitly (jupyter_client's launcher would close it). The cells' output
is printed as it comes (stdout to stdout, stderr to stderr), so the watch's live view and the
store's stderr tail see what a script would print, and no more: not a cell's value, nor the
text standing in for a plot. A cell that raises ends the run: its error is
printed to stderr as Python prints a script's traceback, and the exit status is 1. The kernel
is started in a session of its own by jupyter_client; it ends with this process (ipykernel's
parent poller), and a halt at --steps in it ends as its parent does (child/watch_state.halt).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import warnings
from pathlib import Path

# The ANSI colours of IPython's tracebacks, left out of what the store keeps and explain reads
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def read(path: Path):
    """The notebook, validated (cells without ids given theirs, as Jupyter does on saving);
    ValueError with one line saying what is wrong."""
    import nbformat

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # nbformat's MissingIDFieldWarning: normalised below
            notebook = nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    except Exception as exc:  # not JSON, or JSON that is not a notebook at all
        raise ValueError(f"{path.name} is not a readable notebook ({_first_line(exc)})") from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, normalised = nbformat.validator.normalize(notebook)
        notebook = nbformat.from_dict(normalised)
        nbformat.validate(notebook)
    except nbformat.ValidationError as exc:
        raise ValueError(f"{path.name} is not a valid notebook: {_first_line(exc.message)}") from None
    except Exception as exc:  # nbformat's normaliser meets a shape it cannot read
        raise ValueError(f"{path.name} is not a valid notebook: {_first_line(exc)}") from None
    return notebook


def _first_line(exc) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _client_class():
    from nbclient import NotebookClient

    class Streaming(NotebookClient):
        """Prints each stream output as the kernel sends it (the cell's `print`, Keras' progress)."""

        kernel_process = None  # its Popen, kept past nbclient's clean-up: how the kernel ended

        async def async_start_new_kernel(self, **kwargs):
            await super().async_start_new_kernel(**kwargs)
            self.kernel_process = getattr(self.km.provisioner, "process", None)
            try:  # in place of nbclient's own handler, set just before this
                asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, self.ended)
            except (RuntimeError, NotImplementedError):  # not the main thread; not POSIX
                pass

        def ended(self):
            """SIGTERM: gpuscout ends this run (a halt at --steps, or its own end). The kernel goes
            with it, and nothing more is printed: nbclient's handler tore the kernel down and the
            cell then failed on a dead kernel, printing its error and a traceback of its clean-up
            into the tune's progress (issue 62, item 8: seen on an H200)."""
            if self.kernel_process is not None and self.kernel_process.poll() is None:
                self.kernel_process.terminate()
            os._exit(128 + signal.SIGTERM)

        def output(self, outs, msg, display_id, cell_index):
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                stream = sys.stderr if content.get("name") == "stderr" else sys.stdout
                stream.write(content.get("text", ""))
                stream.flush()
            elif kind == "display_data" and _text_only(content.get("data", {})):
                print(content["data"]["text/plain"], flush=True)
            return super().output(outs, msg, display_id, cell_index)

    return Streaming


def _text_only(data: dict) -> bool:
    """Whether a display is text to print, as a script's print would be. A cell's last value
    (execute_result: `model.fit(...)`'s `<keras...History at 0x...>`) is left out, as `python
    train.py` prints none; so is the text that stands in for an image or a page (matplotlib's
    `<Figure size 640x480 with 1 Axes>`), which is not what was shown (issue 62, item 8)."""
    return "text/plain" in data and not any(kind.startswith(("image/", "text/html")) for kind in data)


def over_ipc(client) -> None:
    """The kernel reached through Unix sockets in Jupyter's runtime folder (by absolute path: the
    kernel runs in the notebook's folder), not TCP ports: nothing listens on the network, and
    ipykernel has no unencrypted-TCP warning to print into the user's output."""
    from jupyter_core.paths import jupyter_runtime_dir

    folder = Path(jupyter_runtime_dir())
    folder.mkdir(parents=True, exist_ok=True)
    client.km = client.create_kernel_manager()
    client.km.transport = "ipc"
    client.km.ip = str(folder / f"gpuscout-{os.getpid()}-{id(client):x}")


def run(path: Path) -> int:
    from nbclient.exceptions import CellExecutionError, DeadKernelError

    try:
        notebook = read(path)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    channel = os.environ.get("GPUSCOUT_EVENTS_FD")
    client = _client_class()(
        notebook, timeout=None, allow_errors=False, resources={"metadata": {"path": str(path.parent)}}
    )
    over_ipc(client)
    try:
        client.execute(pass_fds=(int(channel),) if channel else ())
    except CellExecutionError as exc:
        cell = next(
            (
                i
                for i, c in enumerate(notebook.cells)
                if c.cell_type == "code" and any(o.get("output_type") == "error" for o in c.get("outputs", []))
            ),
            None,
        )
        where = f"cell {cell + 1} of {path.name}" if cell is not None else path.name
        print(ANSI.sub("", exc.traceback).rstrip(), file=sys.stderr)
        print(f"{where} raised {exc.ename}: {ANSI.sub('', exc.evalue)}", file=sys.stderr)
        return 1
    except Exception as exc:  # a dead kernel, or nbclient's clean-up of one failing in turn
        if not isinstance(exc, DeadKernelError) and not isinstance(exc.__context__, DeadKernelError):
            raise
        print(f"error: the kernel running {path.name} {_death(client)} in the middle of a cell", file=sys.stderr)
        return 1
    return 0


def _death(client) -> str:
    """How the kernel ended, as its exit status says (a signal: SIGKILL is the OOM killer's, or kill -9)."""

    process = client.kernel_process
    code = process.poll() if process is not None else None
    if code is not None and code < 0:
        return f"was killed by {signal.Signals(-code).name}" + (" (out of memory? or kill -9)" if -code == 9 else "")
    return f"exited with code {code}" if code is not None else "died"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m gpuscout.measure.notebook_runner NOTEBOOK.ipynb", file=sys.stderr)
        return 2
    return run(Path(argv[0]).resolve())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
