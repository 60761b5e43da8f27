"""`make test`'s pytest: the suite as two sessions at once, one per core.

    python -m tests.lanes [pytest options]

* the `processes` lane, `pytest -m "processes and not soak"`: real node processes that mostly
  wait on leases, timers and each other (about 480 s of wall for 200 s of CPU on 2 cores); its
  report goes to PROCESSES_LOG and is printed when both lanes are done;
* the other lane, `pytest -m "not processes and not soak"` at nice 10: the rest, mostly
  CPU-bound, with the simulation seeds computed at idle priority while it runs
  (`tests/sim/ahead.py`). At nice 10 it takes a core from a process test only when that test
  does not want it, and the seeds take a core from neither.

One session after the other took 13-14 min on 2 cores; the lanes end in about 8. The exit
status is 0 when both passed (or one lane had no test selected), else the first failing
lane's. Ctrl-C reaches both sessions (the terminal's process group), and each tears its
fixtures and node processes down.
`pytest -m "not soak"` still runs the same tests in one session.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROCESSES = "processes and not soak"
OTHERS = "not processes and not soak"
OTHERS_NICE = 10
PROCESSES_LOG = Path(".pytest-processes.log")
INTERRUPTED = 130  # a shell's status for a process ended by SIGINT
NO_TESTS = 5  # pytest's status when the options select none of a lane's tests


def main(argv: list[str]) -> int:
    pytest = [sys.executable, "-m", "pytest", *argv]
    with PROCESSES_LOG.open("wb") as log:
        processes = subprocess.Popen(
            [*pytest, "-m", PROCESSES, "-p", "no:cacheprovider"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        others = subprocess.Popen([*pytest, "-m", OTHERS], preexec_fn=lambda: os.nice(OTHERS_NICE))
        try:
            statuses = [others.wait()]
            print(f"-- the processes lane ({PROCESSES}): its report when it ends --", flush=True)
            statuses.append(processes.wait())
        except KeyboardInterrupt:  # the terminal's SIGINT reached both lanes too: let them
            others.wait()  # tear their fixtures and node processes down
            processes.wait()
            statuses = [INTERRUPTED]
    sys.stdout.write(PROCESSES_LOG.read_text(errors="replace"))
    failed = [status for status in statuses if status not in (0, NO_TESTS)]
    return failed[0] if failed else NO_TESTS if set(statuses) == {NO_TESTS} else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
