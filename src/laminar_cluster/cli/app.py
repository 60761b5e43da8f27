"""The `laminar-cluster` Typer application: the app and its `bench` group, the options every
command shares, `--version`, and `guard`, which turns our errors into one line and an exit code.

Exit codes mean the same in every command: 0 success; 1 a bad record found or a check that
failed; 2 a usage error (a bad flag, URL or configuration, or a store that cannot be used as
named: no such directory or bucket, no credentials, ...). `node` adds its own (cli.node).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from typing import Annotated, Final

import typer

from laminar_cluster.cli.config import option
from laminar_cluster.errors import InvalidArgument, LaminarError
from laminar_cluster.store.diagnose import redact_text
from laminar_cluster.views.output import error_console

EXIT_OK: Final = 0
EXIT_PROBLEM: Final = 1  # a bad record, or a check that failed
EXIT_USAGE: Final = 2

app = typer.Typer(
    name="laminar-cluster",
    help="Cluster control plane for exactly-once stream processing over an object store. "
    "Every flag can also be set as LAMINAR_<FLAG> (e.g. LAMINAR_STORE) or in a TOML file "
    "(--config or LAMINAR_CONFIG).",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(help="Benchmarks: each prints its figures (JSON with --json).")
app.add_typer(bench_app, name="bench")

StoreOption = Annotated[
    str,
    option(
        "--store",
        help="Store URL: memory://, file:///abs/path, s3://bucket/prefix?endpoint=..., gs://, az://",
    ),
]
JsonOption = Annotated[bool, option("--json", help="Print JSON instead of tables.")]
EventsOption = Annotated[int, option("--events", min=0, help="Events in the workload.")]
PartitionsOption = Annotated[int, option("--partitions", min=1, help="Event log partitions.")]
KeysOption = Annotated[int, option("--keys", min=1, help="Distinct keys.")]
SeedOption = Annotated[int, option("--seed", min=0, help="Workload seed.")]
PARTITIONS_DEFAULT: Final = 64
KEYS_DEFAULT: Final = 10_000
SEED_DEFAULT: Final = 0


def version() -> str:
    """The installed package's version."""
    try:
        return importlib.metadata.version("laminar-cluster")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"laminar-cluster {version()}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_print_version,
            help="Print the version and exit.",
        ),
    ] = False,
) -> None:
    """Cluster control plane for exactly-once stream processing over an object store."""


def guard(action: Callable[[], int]) -> int:
    """Run a command body; report our own errors as one line (never a secret): exit 2."""
    try:
        return action()
    except InvalidArgument as error:
        say_error(str(error))
        return EXIT_USAGE
    except LaminarError as error:
        say_error(f"{type(error).__name__}: {error}")
        return EXIT_USAGE


def say_error(message: str) -> None:
    """One line on stderr: `error: ...`, the first line of `message`, secrets redacted."""
    first = message.strip().splitlines()[0] if message.strip() else "failed"
    error_console.print("error:", redact_text(first), style=None, markup=False, soft_wrap=True)
