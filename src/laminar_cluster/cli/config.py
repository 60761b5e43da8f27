"""One configuration for every command: flags, environment variables and a TOML file
(issue 17 "One configuration").

Every flag `--some-flag` can also be given as the environment variable `LAMINAR_SOME_FLAG`
(`LAMINAR_` + the flag name in upper case, dashes as underscores: `LAMINAR_STORE`,
`LAMINAR_NODE_ID`, `LAMINAR_METRICS_PORT`), and as the key `some-flag` of a TOML file named by
`--config PATH` or `LAMINAR_CONFIG`. Precedence: flag > environment > file > default.

The file holds top-level keys, which apply to every command that has that flag, and tables
named after a command (`[node]`, `[status]`, `[bench.store]`), whose keys apply to that command
only and win over the top-level ones:

    store = "file:///var/lib/laminar"

    [node]
    node-id = 1
    metrics-port = 9101

A key that is no flag of any command (top level) or of its command (in a table) is an error
naming the key and the file (exit 2), as is a file that is not valid TOML.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Final

import typer

ENV_PREFIX: Final = "LAMINAR_"
CONFIG_ENV: Final = "LAMINAR_CONFIG"


def env_name(flag: str) -> str:
    """The environment variable of a flag: `--node-id` -> `LAMINAR_NODE_ID`."""
    return ENV_PREFIX + flag.lstrip("-").upper().replace("-", "_")


def option(flag: str, *other: str, **settings: Any) -> Any:
    """A typer option that also reads its environment variable (`env_name`)."""
    return typer.Option(flag, *other, envvar=env_name(flag), show_envvar=True, **settings)


def _flags_of(command: Any) -> dict[str, str]:
    """The long flags of a click command, without dashes, to their parameter names."""
    flags: dict[str, str] = {}
    for param in command.params:
        for opt in (*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ())):
            if opt.startswith("--") and opt not in ("--config", "--help"):
                flags[opt[2:]] = str(param.name)
    return flags


def _commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every leaf command under `group`, with its path of names (`("bench", "store")`)."""
    for name, command in getattr(group, "commands", {}).items():
        if getattr(command, "commands", None) is not None:
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


def _read(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as file:
            return tomllib.load(file)
    except OSError as error:
        raise typer.BadParameter(f"{path}: cannot read it: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise typer.BadParameter(f"{path}: not valid TOML: {error}") from None


def _section(data: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    """The table of the command at `path` (`[bench.store]` for ("bench", "store")), if any."""
    found: Any = data
    for name in path:
        found = found.get(name) if isinstance(found, dict) else None
    return found if isinstance(found, dict) else None


def check_file(data: dict[str, Any], root: Any, path: Path) -> None:
    """Every key is a flag: of some command (top level) or of its command (in its table)."""
    leaves = dict(_commands(root))
    every_flag = {flag for command in leaves.values() for flag in _flags_of(command)}
    names = {part for command_path in leaves for part in command_path}
    for key, value in data.items():
        if isinstance(value, dict) and key in names:
            continue
        if key not in every_flag:
            raise typer.BadParameter(
                f"{path}: unknown key {key!r}: not a flag of any command (keys are flag names "
                "without the dashes, e.g. node-id; tables are command names, e.g. [node])"
            )
    for command_path, command in leaves.items():
        section = _section(data, command_path) or {}
        flags = _flags_of(command)
        for key, value in section.items():
            if key not in flags and not isinstance(value, dict):
                table, command_name = ".".join(command_path), " ".join(command_path)
                raise typer.BadParameter(
                    f"{path}: unknown key {key!r} in [{table}]: not a flag of `{command_name}`"
                )


def defaults_for(data: dict[str, Any], command: Any, path: tuple[str, ...]) -> dict[str, Any]:
    """The file's values for one command, by parameter name: top-level keys it has a flag for,
    then its own table's keys over them."""
    flags = _flags_of(command)
    values = {flags[key]: value for key, value in data.items() if key in flags}
    section = _section(data, path) or {}
    values.update({flags[key]: value for key, value in section.items() if key in flags})
    return values


def load_config(ctx: typer.Context, value: Path | None) -> None:
    """`--config`'s callback (eager, before every other option): the file's values become the
    command's defaults, below flags and environment variables."""
    if value is None:
        return
    data = _read(value)
    root = ctx.find_root().command
    check_file(data, root, value)
    path = _command_path(ctx)
    ctx.default_map = {**(ctx.default_map or {}), **defaults_for(data, ctx.command, path)}


def _command_path(ctx: typer.Context) -> tuple[str, ...]:
    """The command names below the root (`("bench", "store")`)."""
    names: list[str] = []
    current: Any = ctx
    while current is not None and current.parent is not None:
        names.append(str(current.info_name))
        current = current.parent
    return tuple(reversed(names))


ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        envvar=CONFIG_ENV,
        show_envvar=True,
        is_eager=True,
        expose_value=False,
        callback=load_config,
        dir_okay=False,
        help="TOML file of flag values (keys are flag names; [command] tables). Precedence: "
        "flag > LAMINAR_* environment variable > this file > default.",
    ),
]
