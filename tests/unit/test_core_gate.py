"""Instances of one model take every core for one text only while the others idle (hotpath.runtime.core_gate)."""

import os
import subprocess
import sys

from hotpath.runtime.core_gate import CoreGate


def _gates(tmp_path, *names):
    return [CoreGate(tmp_path, "hotpath-cores-1-m-", name) for name in names]


def test_a_text_goes_wide_only_while_every_other_instance_idles(tmp_path):
    a, b = _gates(tmp_path, "m_0_0", "m_0_1")
    assert a.enter()          # b idle
    assert not b.enter()      # a busy: b stays on its own core
    a.leave()
    assert not a.enter()      # b still busy
    b.leave()
    a.leave()
    c, = _gates(tmp_path, "m/0 2")     # an instance that starts later is seen too; odd names stay one file
    assert c.path.parent == tmp_path and "/" not in c.path.name
    assert b.enter()
    assert not c.enter() and not a.enter()
    for g in (a, b, c):
        g.leave()
        g.close()


def test_another_models_or_servers_instances_do_not_count(tmp_path):
    mine = CoreGate(tmp_path, "hotpath-cores-1-m-", "m_0_0")
    other_model = CoreGate(tmp_path, "hotpath-cores-1-n-", "n_0_0")
    other_server = CoreGate(tmp_path, "hotpath-cores-2-m-", "m_0_0")
    assert other_model.enter() and other_server.enter()
    assert mine.enter()


def test_a_dead_instance_releases_its_cores(tmp_path):
    code = ("import sys, os, time; sys.path.insert(0, sys.argv[1]); from pathlib import Path; "
            "from hotpath.runtime.core_gate import CoreGate; "
            "g = CoreGate(Path(sys.argv[2]), 'hotpath-cores-1-m-', 'm_0_1'); g.enter(); print('in', flush=True); "
            "time.sleep(60)")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    child = subprocess.Popen([sys.executable, "-c", code, root, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "in"
        mine, = _gates(tmp_path, "m_0_0")
        assert not mine.enter()
        mine.leave()
    finally:
        child.kill()
        child.wait()
    assert mine.enter()
