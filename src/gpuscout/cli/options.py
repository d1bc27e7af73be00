"""Options several commands share, defined once, and option groups.

A group is a dataclass whose fields are typer options (`Annotated[type, typer.Option(...)] =
default`); a command takes the group as one parameter and `@grouped` turns its fields into the
command's options, in order, and hands the command the group built from them. Typer has no
parameter groups of its own (fastapi/typer#111); this keeps a command with thirty options to a
signature of ten lines, and each option's name, default and help in one place.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, get_type_hints

import typer

from gpuscout.catalog.pricing import DEFAULT_AMORTISE_YEARS, DEFAULT_USD_PER_KWH, PricingOptions
from gpuscout.comparison import Filters
from gpuscout.core import durations
from gpuscout.core.errors import UsageError, parse_whole_numbers
from gpuscout.core.spec import Protocol
from gpuscout.measure import engine, rules
from gpuscout.report import terminal
from gpuscout.store import default_store_path
from gpuscout.tracking import mlflow_runs

StorePath = Annotated[
    Path | None,
    typer.Option(
        "--store",
        envvar="GPUSCOUT_STORE",
        help="Results store (SQLite) [default: results.sqlite in the user data dir].",
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print the result as JSON (for scripts) instead of tables.")]

# Every option and argument that names a file, by command and parameter. What gpuscout writes goes
# through the one door, core/outputs/; what it reads through core/inputs.py (bounded, regular
# files only, `-` for standard input where said). tests/integration/test_outputs.py finds every
# path-typed parameter of every command and fails on one that is in none of these, then drives
# each output through every kind of file a name can reach (docs/reliability.md).
WRITES = {("report", "out"), ("results export", "out"), ("results salvage", "out"), ("tune", "patch")}
READS = {
    ("sweep", "path"),
    ("results import", "path"),
    ("catalog", "catalog_file"),
    ("recommend", "catalog_file"),
    ("doctor", "explain_input"),
    ("bench", "model"),
    ("tune", "model"),
    ("recommend", "model"),
    ("tune", "pipeline"),
    ("bench", "dataset"),
}
# The store every command opens (store/sqlite.py refuses what is not one), and the commands a verb
# runs (a script and its arguments: the user's own).
STORE_AND_COMMANDS = {"store_path", "command", "target"}


def grouped(command: Callable) -> Callable:
    """Let `command` take option groups: see the module's docstring."""
    hints = get_type_hints(command, include_extras=True)
    params, groups = [], {}
    for name, param in inspect.signature(command).parameters.items():
        kind = hints.get(name)
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            fields = dataclasses.fields(kind)
            field_hints = get_type_hints(kind, include_extras=True)
            groups[name] = (kind, [f.name for f in fields])
            params += [
                inspect.Parameter(
                    f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=field_hints[f.name]
                )
                for f in fields
            ]
        else:
            params.append(param.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=kind))

    @functools.wraps(command)
    def wrapper(**values):
        for name, (kind, fields) in groups.items():
            values[name] = kind(**{f: values.pop(f) for f in fields})
        return command(**values)

    wrapper.__signature__ = inspect.Signature(params)
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    del wrapper.__wrapped__  # typer must read the flattened signature, not the command's
    return wrapper


# GPUs named by index, in every verb that takes several (sweep's slots, scale's devices; issue 62:
# one name for one idea across verbs). The order given is kept: scale's one-GPU run is the first's.
Gpus = Annotated[
    str | None,
    typer.Option("--gpus", help="Which GPUs, by index, e.g. 0,2,3, in the order used [default: every GPU]."),
]


def gpu_indices(text: str | None) -> tuple[int, ...] | None:
    """--gpus' indices, each once, in the order given; None when not given (every GPU)."""
    if text is None:
        return None
    # NVML numbers GPUs from 0; 1024 is far past any host
    return parse_whole_numbers(text, "--gpus", "distinct GPU indices", "0,1,3", least=0, most=1023, sort=False)


@dataclasses.dataclass
class Device:
    gpu: Annotated[int | None, typer.Option(help="GPU index to run on [default: 0 when there is a GPU].")] = None
    cpu: Annotated[bool, typer.Option("--cpu", help="Run on the CPU even when a GPU is present.")] = False

    def choice(self) -> rules.DeviceChoice:
        return rules.DeviceChoice(self.gpu, self.cpu)


def protocol_options(base: Protocol, where: str = "") -> type:
    """The protocol's options, with `base`'s defaults (bench's, tune's shorter one); `where`
    names what else may set them (a suite). Built with make_dataclass: the help texts name
    `base`'s values, which postponed annotations could not see."""
    also = f", or {where}" if where else ""

    def settings(self, default: Protocol = base) -> Protocol:
        """The protocol: what was given, else `default`'s (base, or a suite's)."""
        given = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        return checked(Protocol, {**default.model_dump(), **given})

    fields = [
        (
            "warmup_steps",
            Annotated[
                int | None,
                typer.Option(
                    help=f"Steps run and discarded after the compile step [default: {base.warmup_steps}{also}]."
                ),
            ],
            None,
        ),
        (
            "windows",
            Annotated[int | None, typer.Option(help=f"Timing windows per run [default: {base.windows}{also}].")],
            None,
        ),
        (
            "window_steps",
            Annotated[int | None, typer.Option(help=f"Minimum steps per window [default: {base.window_steps}].")],
            None,
        ),
        (
            "window_seconds",
            Annotated[
                float | None, typer.Option(help=f"Minimum seconds per window [default: {base.window_seconds:g}{also}].")
            ],
            None,
        ),
    ]
    return dataclasses.make_dataclass("ProtocolOptions", fields, namespace={"settings": settings})


def checked(model, values: dict):
    """A pydantic model built from option values; a bad one is a UsageError naming the option."""
    from pydantic import ValidationError

    try:
        return model(**values)
    except ValidationError as exc:
        first = exc.errors()[0]
        option = "--" + str(first["loc"][0]).replace("_", "-") if first["loc"] else "an option"
        raise UsageError(f"invalid {option}: {first['msg']} (got {first.get('input')!r})") from None


def renamed(old: str, new: str, given_old, given_new):
    """An option's value where it has an old name still taken (issue 62: one name for one idea
    across verbs): the old one says the new one; both at once is bad input."""
    if given_old is None:
        return given_new
    if given_new is not None:
        raise UsageError(f"{old} is {new}'s old name: give {new} alone")
    terminal.console(stderr=True).print(f"note: {old} here is now {new}", markup=False, highlight=False)
    return given_old


# The packaged catalog's cloud providers, named in --provider's help (a unit test holds them equal
# to the catalog's: issue 62, the help named three of four)
CATALOG_PROVIDERS = ("aws", "gcp", "lambda", "modal", "runpod", "spheron", "vast")


@dataclasses.dataclass
class Pricing:
    price: Annotated[
        float | None, typer.Option("--price", help="Cost of one GPU-hour in USD, instead of the catalog's.")
    ] = None
    provider: Annotated[
        str | None,
        typer.Option(
            help=f"Use this cloud provider's catalog price ({', '.join(CATALOG_PROVIDERS)}, or one from your "
            "--catalog)."
        ),
    ] = None
    owned: Annotated[
        bool, typer.Option("--owned", help="Cost GPUs you own: purchase price over --amortise-years plus power.")
    ] = False
    amortise_years: Annotated[float, typer.Option(help="--owned: years the purchase price is spread over.")] = (
        DEFAULT_AMORTISE_YEARS
    )
    usd_per_kwh: Annotated[
        float | None,
        typer.Option(
            "--usd-per-kwh",
            help=f"--owned: electricity price, USD per kWh  [default: {DEFAULT_USD_PER_KWH:g}]",
            show_default=False,
        ),
    ] = None  # None: not given (the default), so that its old name given with it is refused
    # its old name, too long for an 80-column help (cut to `--electricity-usd-pe…`): still taken, and says
    # the new one
    electricity_usd_per_kwh: Annotated[
        float | None, typer.Option("--electricity-usd-per-kwh", hidden=True, help="Now --usd-per-kwh.")
    ] = None

    def options(self) -> PricingOptions:
        kwh = renamed("--electricity-usd-per-kwh", "--usd-per-kwh", self.electricity_usd_per_kwh, self.usd_per_kwh)
        kwh = DEFAULT_USD_PER_KWH if kwh is None else kwh
        return PricingOptions(self.price, self.provider, self.owned, self.amortise_years, kwh).check()


def measure_options(timeout: str, telemetry: bool, pricing: Pricing | None = None) -> engine.MeasureOptions:
    """The engine's options: --timeout (a duration, bare seconds: core/durations.py), telemetry, pricing."""
    return engine.MeasureOptions(
        timeout_s=durations.seconds(timeout, "--timeout"),
        telemetry=telemetry,
        pricing=pricing.options() if pricing else PricingOptions(),
    )


def given_args(ctx: typer.Context, exclude: set[str]) -> list[str]:
    """The options of the running command the user set (not left at their default), as command-line
    arguments again: what a command forwards to the commands it prints for other hosts, so that no
    option is lost on the way. `exclude`: parameter names to leave out (this host's store, ...)."""
    args: list[str] = []
    for param in ctx.command.params:
        if param.param_type_name != "option" or param.name in exclude:
            continue
        value = ctx.params.get(param.name)
        if value is None or value == param.default:
            continue
        if param.is_flag and param.secondary_opts:  # --xla/--no-xla
            args.append(param.opts[0] if value else param.secondary_opts[0])
        elif param.is_flag:
            args.append(param.opts[0])
        else:
            args += [param.opts[0], _as_arg(value)]
    return args


def _as_arg(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclasses.dataclass
class Tracking:
    mlflow: Annotated[
        str | None,
        typer.Option(
            "--mlflow",
            metavar="[URI]",
            help="Also log the runs to this MLflow tracking server (alone: MLFLOW_TRACKING_URI's); they are "
            "stored here all the same.",
        ),
    ] = None
    experiment: Annotated[
        str, typer.Option("--experiment", help="--mlflow: the MLflow experiment, made when missing.")
    ] = mlflow_runs.DEFAULT_EXPERIMENT

    def target(self, store_path: Path | None = None) -> tuple[str, str] | None:
        """(tracking URI, experiment), checked before anything runs; None without --mlflow. The
        results store (`store_path`, else the default one) is never MLflow's backend."""
        if self.mlflow is None:
            if self.experiment != mlflow_runs.DEFAULT_EXPERIMENT:
                raise UsageError("--experiment names an MLflow experiment: give --mlflow too")
            return None
        if not self.experiment.strip():
            raise UsageError("--experiment is empty: name the MLflow experiment")
        try:
            uri = mlflow_runs.tracking_uri(self.mlflow)
            mlflow_runs.not_the_store(uri, store_path or default_store_path())
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        return uri, self.experiment.strip()


def one_format(fmt: str | None, default: str, **shorthands: bool) -> str:
    """The output format asked for: `--format F`, or one of its short forms (`--json`,
    `--markdown`, `--csv`: `shorthands` by name), else `default`; two at once is bad input."""
    given = [name for name, on in shorthands.items() if on]
    if len(given) + (fmt is not None) > 1:
        *first, last = ["--format", *(f"--{name}" for name in shorthands)]
        raise UsageError(f"choose one of {', '.join(first)} and {last}")
    return fmt or (given[0] if given else default)


@dataclasses.dataclass
class Selection:
    """Which stored runs a comparison or a report covers."""

    workload: Annotated[
        list[str] | None, typer.Option("--workload", "-w", metavar="NAME", help="Only these workloads (repeatable).")
    ] = None
    gpu_name: Annotated[str | None, typer.Option("--gpu-name", help="Only runs on GPUs whose name contains this.")] = (
        None
    )
    gpu: Annotated[
        str | None, typer.Option("--gpu", hidden=True, help="Now --gpu-name (--gpu is an index elsewhere).")
    ] = None
    precision: Annotated[str | None, typer.Option(help="Only this precision.")] = None
    backend: Annotated[str | None, typer.Option(help="Only this backend.")] = None

    def filters(self) -> Filters:
        gpu = renamed("--gpu", "--gpu-name", self.gpu, self.gpu_name)
        return Filters(tuple(self.workload or ()), gpu, self.precision, self.backend)
