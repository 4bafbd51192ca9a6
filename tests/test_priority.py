"""Every thread of an `index` or `watch` run works at the lowered priority (issue 32): Linux keeps a niceness per
thread and `os.nice` changes only the caller's, so `lower_priority` lowers the threads started before it too.

`lower_priority` changes the niceness of the process that calls it: each check runs in a child Python process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from puremind.services import INDEXING_NICENESS

REPO = Path(__file__).resolve().parent.parent

# Threads started before lower_priority (a plain thread and a pool's worker, both blocked on an Event), then
# one started after it; prints the niceness of every thread as the kernel shows it (/proc/self/task/*/stat, field
# 19), with the thread's name, before the threads are let go.
_CHILD = """
import json, os, threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from puremind.services import lower_priority

go = threading.Event()
started = threading.Barrier(4)

def wait():
    started.wait(timeout=30)
    go.wait(timeout=60)

early = threading.Thread(target=wait, name="early")
early.start()
pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pool")
working = pool.submit(wait)
before = os.nice(0)
took = lower_priority()
late = threading.Thread(target=wait, name="late")
late.start()
started.wait(timeout=30)  # the three threads are running (blocked on the Event)
niceness = {}
for task in Path("/proc/self/task").iterdir():
    stat = (task / "stat").read_text()
    name = (task / "comm").read_text().strip()
    niceness[f"{task.name} {name}"] = int(stat.rsplit(")", 1)[1].split()[16])
print(json.dumps({"before": before, "took": took, "niceness": niceness}), flush=True)
go.set()
early.join(); late.join(); working.result(); pool.shutdown()
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="threads have their own niceness on Linux only")
def test_lower_priority_lowers_every_thread_of_the_process_started_before_or_after_it():
    done = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    expected = min(19, report["before"] + INDEXING_NICENESS)
    assert report["took"] is True
    assert len(report["niceness"]) >= 4, report  # the main thread, early, the pool's worker, late
    assert set(report["niceness"].values()) == {expected}, report


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="threads have their own niceness on Linux only")
def test_lower_priority_never_makes_a_nicer_thread_less_nice():
    code = """
import os, threading
from puremind.services import lower_priority
go, ready = threading.Event(), threading.Event()
tid = []
def wait():
    tid.append(threading.get_native_id())
    os.setpriority(os.PRIO_PROCESS, 0, 19)  # this thread only, on Linux
    ready.set()
    go.wait(timeout=60)
t = threading.Thread(target=wait)
t.start()
assert ready.wait(timeout=30)
lower_priority()
print(os.getpriority(os.PRIO_PROCESS, tid[0]), os.nice(0), flush=True)
go.set(); t.join()
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    nicer, main = map(int, done.stdout.split())
    assert nicer == 19 and main >= INDEXING_NICENESS
