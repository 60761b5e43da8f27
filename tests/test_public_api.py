"""The public API is the names `laminar_cluster.__all__` lists, each importable from the top
level, documented, and defined where `PUBLIC` says; nothing else is exported."""

from __future__ import annotations

import importlib
import subprocess
import sys

import laminar_cluster


def test_every_public_name_imports_from_the_top_level_with_a_docstring() -> None:
    assert sorted(laminar_cluster.__all__) == sorted(laminar_cluster.PUBLIC)
    for name in laminar_cluster.__all__:
        value = getattr(laminar_cluster, name)
        module = importlib.import_module(laminar_cluster.PUBLIC[name])
        assert getattr(module, name) is value, name
        if callable(value):
            assert (value.__doc__ or "").strip(), f"{name} has no docstring"


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        laminar_cluster.Processor  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as error:
        assert "Processor" in str(error)
    else:
        raise AssertionError("an internal name was exported")


def test_importing_the_package_loads_no_optional_extra() -> None:
    code = "import sys, laminar_cluster; print(sorted({'pyarrow', 'psycopg'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_package_is_typed() -> None:
    from importlib.resources import files

    assert files("laminar_cluster").joinpath("py.typed").is_file()
