"""`hotpath tune` end to end on a real server: reloads, sweeps, the trial log, the report, the winner left running."""

import json

import pytest
import tritonclient.grpc as grpcclient

from hotpath.server.local_triton import LocalTriton
from hotpath.server.ports import ServerPorts, free_ports
from hotpath.sweeps.measure.perf_analyzer import Measurement
from hotpath.sweeps.measure.reconfigure import served_config
from hotpath.sweeps.tune.run import run_tune
from hotpath.tuning.knobs import read_knobs
from hotpath.tuning.slo import load_slos

pytestmark = pytest.mark.slow   # minutes of load: `pytest -m 'not slow'` leaves it out


@pytest.fixture(scope="module")
def explicit_url(built_repository):
    from conftest import all_but_generation

    http, grpc, metrics = free_ports(3)
    with LocalTriton(all_but_generation(built_repository), ports=ServerPorts(http, grpc, metrics),
                     model_control="explicit") as server:
        yield server.grpc_url


def test_a_short_tuning_run(explicit_url, tmp_path):
    slo = load_slos("cpu")["image_classification"]   # an ensemble: reloads of its steps
    client = grpcclient.InferenceServerClient(explicit_url)
    cache_before = served_config(client, slo.endpoint).response_cache.enable
    best, trials, record = run_tune(explicit_url, slo, max_trials=3, concurrencies=(2,),
                                    measurement=Measurement(1000, 100, 3), reports_dir=tmp_path, log=lambda m: None)
    assert len(trials) == 3 and trials[0].change == "baseline" and trials[1].change == "baseline (repeat)"
    # Every trial measured concurrency 1 (the constraint), the sweep and the declared load (which a busy
    # host may miss: shed requests), the sweep points with the server-side breakdown. A c=1 p95 already past
    # the target skips the sweep above it (closed-loop p95 only grows with concurrency), never the declared
    # load: on a busy host that is a correct trial, not a short one.
    for t in trials:
        measured = [p.concurrency for p in t.points]
        missed_at_1 = t.points[0].p95_ms > slo.p95_ms
        assert measured == ([1, slo.concurrency] if missed_at_1 else [1, 2, slo.concurrency]), (measured, t.points[0])
        swept = t.points[0] if missed_at_1 else t.points[1]
        assert swept.throughput > 0 and set(best.state) <= set(swept.steps), t.change
    # The third trial moved a knob: the server ran it (its own knobs), then got the winner back.
    assert trials[2].state != trials[0].state
    assert {m: read_knobs(served_config(client, m)) for m in best.state} == best.state
    assert served_config(client, slo.endpoint).response_cache.enable == cache_before
    logged = [json.loads(line) for line in record.read_text().splitlines()]
    assert [t["change"] for t in logged] == [t.change for t in trials]
    assert record.with_suffix(".start.json").exists()
    report = (tmp_path / f"tune-{slo.endpoint}.md").read_text()
    assert trials[2].change in report and "Winner: trial" in report


def test_quick_tune_keeps_its_result_per_host_and_never_touches_the_specs(explicit_url, tmp_path):
    from hotpath import paths
    from hotpath.specs.repository import read_config
    from hotpath.sweeps.tune.quick import run_quick
    from hotpath.tuning.hardware_key import HardwareKey
    from hotpath.tuning.knobs import read_knobs as knobs_of
    from hotpath.tuning.tuned_values import judge, load

    slo = load_slos("cpu")["text_embedding"]
    specs = {p.name: p.read_text() for p in paths.model_specs_dir().glob("*.toml")}
    lines: list[str] = []
    tuned, path = run_quick(explicit_url, [slo], max_trials=1, path=tmp_path / "tuned.json", log=lines.append)
    assert path == tmp_path / "tuned.json" and load(path).hardware == HardwareKey.detect()
    assert judge(load(path), HardwareKey.detect(), path).state == "match"
    assert "text_embedding" in tuned.endpoints and tuned.seconds > 0 and tuned.command.endswith("text_embedding")
    # One trial is the start itself: nothing moved, nothing differs from the committed defaults.
    committed = knobs_of(read_config(paths.model_repository() / "sentence_embedder"))
    assert all(committed.get(k) != v for kn in tuned.models.values() for k, v in kn.items())
    assert tuned.models == {}
    assert {p.name: p.read_text() for p in paths.model_specs_dir().glob("*.toml")} == specs
    assert any("tuned values for this host" in line for line in lines)
