"""The simulation's checkers fail when they should: each is fed a durable state or a move that
breaks its invariant, built from the state of a real run."""

from __future__ import annotations

import asyncio
from functools import cache

from msgspec.structs import replace

from laminar_cluster.assignment.model import next_for_participants
from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore, Rotated
from laminar_cluster.lease.log import read_record
from laminar_cluster.lease.paths import RECORDS_PREFIX, parse_record_path
from laminar_cluster.lease.records import LeaderAuthorityRecord
from tests.sim.checkers import Checkers
from tests.sim.node import Jump
from tests.sim.simulation import SimConfig, Simulation, run_simulation

SEEDS_TRIED = range(40)


@cache
def finished_run() -> Simulation:
    """The first passing run with a committed drain (a decision record to tamper with)."""
    for seed in SEEDS_TRIED:
        simulation = Simulation(seed, SimConfig())
        result = run_simulation(simulation)
        if not result.violations and simulation.checkers.stats.drain_commits:
            return simulation
    raise AssertionError(f"no passing run with a committed drain among seeds {SEEDS_TRIED}")


def fresh_checkers(simulation: Simulation) -> Checkers:
    return Checkers(simulation.store.direct(), simulation.clock, simulation.vnode_count)


async def decision_records(simulation: Simulation) -> list[LeaderAuthorityRecord]:
    store = simulation.store.direct()
    records = []
    for meta in await store.list(RECORDS_PREFIX):
        record = await read_record(store, parse_record_path(meta.key))
        if record is not None and record.assignment_decision is not None:
            records.append(record)
    return records


def test_the_untouched_run_passes_every_checker() -> None:
    simulation = finished_run()
    checkers = fresh_checkers(simulation)
    asyncio.run(checkers.check_history())
    asyncio.run(checkers.check_backing())
    asyncio.run(checkers.check_authority_log())
    assert checkers.violations == []
    assert checkers.stats.drain_commits > 0 and checkers.committed


def test_rb2_checker_1_owner_outside_the_roster() -> None:
    simulation = finished_run()
    checkers = fresh_checkers(simulation)
    head = simulation.checkers.committed[max(simulation.checkers.committed)]
    stranger = max(p.node_id for p in head.participants) + 1
    checkers._check_shape(replace(head, owners=(stranger, *head.owners[1:])))
    assert any("outside its roster" in v for v in checkers.violations), checkers.violations


def test_rb19_checker_flags_a_changed_committed_version() -> None:
    """Checker 1 remembers every committed version it saw; the durable head no longer matching
    what it saw earlier (here: what it saw carries another timestamp) is a violation."""
    simulation = finished_run()
    checkers = fresh_checkers(simulation)
    asyncio.run(checkers.check_history())
    assert checkers.violations == []
    version = max(checkers.committed)
    seen = checkers.committed[version]
    checkers.committed[version] = replace(seen, updated_at_ms=seen.updated_at_ms + 1)
    asyncio.run(checkers.check_history())
    changed = f"committed assignment v{version} changed after it was seen"
    assert any(changed in v for v in checkers.violations), checkers.violations


def test_rb10_checker_2_bare_successor() -> None:
    simulation = finished_run()

    async def main() -> list[str]:
        store = simulation.store.direct()
        snapshots = AssignmentSnapshotStore(store)
        head = await snapshots.load()
        assert head is not None and not head.draining
        bare = next_for_participants(head, head.owners, head.participants, now_ms=0)
        assert isinstance(await snapshots.save_if_version(bare, head.assignment_version), Rotated)
        checkers = fresh_checkers(simulation)
        await checkers.check_backing()
        await store.delete(f"control/assignment-snapshots/v{bare.assignment_version:020d}.json")
        return checkers.violations

    violations = asyncio.run(main())
    assert any("no drain transition or recovery authority decision" in v for v in violations)


def test_rb8_checker_3_decision_under_another_token() -> None:
    simulation = finished_run()
    records = asyncio.run(decision_records(simulation))
    assert records
    record = records[0]
    deposed = replace(record, lease=replace(record.lease, token=record.lease.token + 1))
    checkers = fresh_checkers(simulation)
    checkers._check_record(deposed)
    assert any(v.startswith("checker 3") for v in checkers.violations), checkers.violations


def test_rb11_checker_4_jump() -> None:
    simulation = finished_run()
    checkers = fresh_checkers(simulation)
    checkers.committed = simulation.checkers.committed
    checkers.check_jumps([Jump(at_s=1.0, node_id=1, boot="b" * 36, before=1, after=3)])
    assert checkers.violations and "moved its registry v1 -> v3" in checkers.violations[0]


def test_checker_5_head_without_a_live_node() -> None:
    simulation = finished_run()
    live = [p.participant for p in simulation.processes.values() if p.participant is not None]
    checkers = fresh_checkers(simulation)
    asyncio.run(checkers.check_converged(live[:1]))
    assert any(v.startswith("checker 5") for v in checkers.violations), checkers.violations
