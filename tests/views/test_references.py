"""The views check every reference an outcome makes (views/references.py; issue 17 "Integrity
you can trust"): on the authority history of `tests/cli/test_lease_commands.py` (a Commit of
epoch 1 at sequence 2 whose capsule names two participant manifests), a missing capsule, a
capsule or manifest whose bytes no longer match their digest make `authority`, `checkpoints`
and `status` exit 1 naming that object, not a neighbour, and `authority` never says
"consistent" over them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from laminar_cluster.checkpoint.paths import CAPSULES_PREFIX
from laminar_cluster.cli.checkpoints import run_checkpoints
from laminar_cluster.cli.lease_view import run_authority
from laminar_cluster.cli.status import run_status
from laminar_cluster.coordinator.paths import manifest_path
from laminar_cluster.store import OVERWRITE, open_store
from tests.cli.test_lease_commands import build_history, file_store_url

MANIFEST = manifest_path(1, 2)  # the second participant's manifest of checkpoint 1


def _history(tmp_path: Path) -> str:
    url = file_store_url(tmp_path)
    asyncio.run(build_history(url))
    return url


def _capsule_key(url: str) -> str:
    async def main() -> str:
        store = open_store(url)
        [meta] = await store.list(CAPSULES_PREFIX)
        await store.close()
        return meta.key

    return asyncio.run(main())


def _overwrite(url: str, key: str, body: bytes | None) -> None:
    async def main() -> None:
        store = open_store(url)
        if body is None:
            await store.delete(key)
        else:
            await store.put(key, body, OVERWRITE)
        await store.close()

    asyncio.run(main())


def _objects(run: object, url: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    capsys.readouterr()
    if run is run_status:
        code = run_status(url, as_json=True, watch=False, interval_s=2.0)
    else:
        code = run(url, as_json=True)  # type: ignore[operator]
    document = json.loads(capsys.readouterr().out)
    return code, [problem["object"] for problem in document["problems"]]


def test_a_consistent_history_passes_every_view(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _history(tmp_path)
    for view in (run_authority, run_checkpoints):
        assert _objects(view, url, capsys) == (0, [])
    capsys.readouterr()
    assert run_authority(url, as_json=False) == 0
    assert "every reference it makes resolves" in capsys.readouterr().out


@pytest.mark.parametrize("damage", ["missing capsule", "capsule bytes", "manifest bytes"])
def test_a_reference_that_does_not_resolve_fails_naming_the_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    url = _history(tmp_path)
    capsule = _capsule_key(url)
    if damage == "missing capsule":
        _overwrite(url, capsule, None)
        wrong = capsule
    elif damage == "capsule bytes":
        _overwrite(url, capsule, b'{"version":5}')
        wrong = capsule
    else:
        _overwrite(url, MANIFEST, b'{"version":1}')
        wrong = MANIFEST
    for view in (run_authority, run_checkpoints):
        code, objects = _objects(view, url, capsys)
        assert code == 1 and objects == [wrong], (view, objects)
    code, objects = _objects(run_status, url, capsys)
    assert code == 1 and objects == [wrong]
    capsys.readouterr()
    assert run_authority(url, as_json=False) == 1
    out = capsys.readouterr().out
    assert f"AUDIT FAILED {wrong}" in out and "consistent" not in out
