"""The perf gate without a server: the endpoint registry, payloads made on first use, missing files,
the quiet-machine check (synthetic /proc and real busy processes), the FastAPI alternative's protocol."""

import json
import os
import signal
import subprocess
import sys
import time
from base64 import b64decode
from pathlib import Path

import numpy as np
import pytest

from hotpath import paths
from hotpath.errors import HotpathError
from hotpath.exporters import samples
from hotpath.exporters.samples import Payload, ensure_input, image_entries, payload_for
from hotpath.sweeps import registry as endpoints
from hotpath.sweeps.gate import before_measuring
from hotpath.sweeps.measure import host_load as quiet
from hotpath.sweeps.measure.point import endpoint_steps
from hotpath.tuning.slo import Slo, load_slos

# --- the registry -------------------------------------------------------------------------------------------


def test_every_endpoint_and_every_slo_has_a_registry_entry():
    served = {p.stem for p in paths.ensemble_specs_dir().glob("*.toml")}
    profiles = __import__("tomllib").loads((paths.ROOT / "perf" / "slo.toml").read_text())["profiles"]
    in_slos = {e for profile in profiles for e in load_slos(profile)}
    assert served and in_slos
    assert served | in_slos <= set(endpoints.ENDPOINTS)


def test_the_lab_compares_every_registered_endpoint():
    from perf.lab.compare.rivals import RIVALS

    assert set(RIVALS) == set(endpoints.ENDPOINTS)


@pytest.mark.parametrize("name", sorted(endpoints.ENDPOINTS))
def test_registry_entry_is_complete(name):
    entry = endpoints.get_endpoint(name)
    steps = endpoint_steps(name)
    assert set(entry.payloads) >= {name, *steps}, "a payload for the endpoint and for every step"
    assert entry.floor_batches[0] == 1 and callable(entry.pipeline) and entry.samples()


@pytest.mark.parametrize("name", sorted(endpoints.ENDPOINTS))
def test_the_labs_rivals_entry_is_complete(name):
    from perf.lab.compare.rivals import rivals_for

    rivals = rivals_for(name)
    assert rivals.searched_step in endpoint_steps(name)
    labels = [a.label for a in rivals.alternatives]
    assert len(labels) == len(set(labels))
    assert {"default", "fastapi-sync", "fastapi-async", "pytriton", "model-analyzer"} <= set(labels)


def test_alternatives_can_be_chosen_by_label():
    from perf.lab.compare.rivals import rivals_for
    from perf.lab.compare.side_by_side import choose

    assert [a.label for a in choose("image_classification", ["pytriton", "default"])] == ["default", "pytriton"]
    assert choose("image_classification", None) == list(rivals_for("image_classification").alternatives)
    with pytest.raises(HotpathError, match="image_classification has no alternative fastapi "):
        choose("image_classification", ["fastapi", "pytriton"])


def test_default_config_reaches_single_model_endpoints_and_ensemble_steps():
    from perf.lab.compare.side_by_side import configured_models

    for name in endpoints.ENDPOINTS:
        steps = endpoint_steps(name)
        assert configured_models(name) == ([name] if steps == [name] else steps)
    assert configured_models("image_classification") == ["image_preprocess", "image_classifier"]


def test_unknown_endpoint_is_named():
    with pytest.raises(HotpathError, match="'ocr' is not in the perf registry"):
        endpoints.get_endpoint("ocr")


# --- payloads and input files ---------------------------------------------------------------------------------


def test_image_payload_is_generated_on_first_use(tmp_path):
    payload = Payload("image_jpeg.json", image_entries, lambda: tmp_path)
    assert not payload.path.exists()
    path = payload.ensure()
    (entry,) = json.loads(path.read_text())["data"]
    serialized = b64decode(entry["IMAGE"]["b64"])
    size = int.from_bytes(serialized[:4], "little")  # BYTES wire format: 4-byte length, then the element
    assert size == len(serialized) - 4 and serialized[4:6] == b"\xff\xd8"  # one JPEG
    stamp = path.stat().st_mtime_ns
    assert payload.ensure() == path and path.stat().st_mtime_ns == stamp  # made once, then reused


def test_every_slo_input_is_committed_or_generated():
    known = {p.path.resolve(): p for p in samples.PAYLOADS.values()}
    for profile in ("cpu", "gpu"):
        for slo in load_slos(profile).values():
            payload = known.get(slo.input_data.resolve())
            assert payload is not None, f"{slo.input_data} is not a registered payload"
            assert payload.make is not None or payload.path.exists()


def test_every_model_payload_can_be_made():
    for model in samples.PAYLOADS:
        data = json.loads(payload_for(model).read_text())["data"]
        assert data and all(isinstance(entry, dict) for entry in data), model


def test_missing_input_file_is_one_clear_line(tmp_path):
    missing = tmp_path / "texts_v2.json"
    with pytest.raises(HotpathError) as err:
        ensure_input(missing, "endpoint text_embedding in perf/slo.toml")
    assert str(err.value) == (f"perf input file {missing} is missing (input_data of endpoint text_embedding "
                              "in perf/slo.toml)")
    with pytest.raises(HotpathError, match="texts_v2.json is missing"):
        before_measuring([Slo("text_embedding", 25.0, 8, missing)], allow_busy=True, log=lambda m: None)
    with pytest.raises(HotpathError, match="not in the perf registry"):
        before_measuring([Slo("ocr", 25.0, 8, missing)], allow_busy=True, log=lambda m: None)


def test_input_named_by_a_registered_payload_is_generated(tmp_path, monkeypatch):
    generated = Payload("gen.json", lambda: [{"TEXT": ["hello"]}], lambda: tmp_path)
    monkeypatch.setattr(samples, "PAYLOADS", {"m": generated})
    assert ensure_input(tmp_path / "gen.json") == tmp_path / "gen.json"
    assert json.loads((tmp_path / "gen.json").read_text()) == {"data": [{"TEXT": ["hello"]}]}


# --- the quiet-machine check ----------------------------------------------------------------------------------


def _stat(pid, name, ppid, utime, stime):
    # /proc/<pid>/stat: pid (comm) state ppid ... utime is field 14, stime field 15
    fields = ["S", str(ppid)] + ["0"] * 9 + [str(utime), str(stime)] + ["0"] * 30
    return f"{pid} ({name}) " + " ".join(fields) + "\n"


def _fake_proc(root: Path, rows) -> Path:
    for pid, name, ppid, utime, stime in rows:
        (root / str(pid)).mkdir(parents=True, exist_ok=True)
        (root / str(pid) / "stat").write_text(_stat(pid, name, ppid, utime, stime))
    (root / "self").mkdir(exist_ok=True)  # not a pid: skipped
    return root


def test_cpu_per_process_from_a_synthetic_proc(tmp_path):
    tick = os.sysconf("SC_CLK_TCK")
    before = quiet.read_proc(_fake_proc(tmp_path / "a", [
        (1, "init", 0, 10, 5), (100, "my (odd) name", 1, 0, 0), (200, "harness", 1, 0, 0), (201, "triton", 200, 0, 0)]))
    after = quiet.read_proc(_fake_proc(tmp_path / "b", [
        (1, "init", 0, 10, 5), (100, "my (odd) name", 1, tick, tick // 2), (200, "harness", 1, tick, 0),
        (201, "triton", 200, 2 * tick, 0), (300, "newcomer", 1, tick // 4, 0)]))
    assert after.processes[100] == ("my (odd) name", 1, 1.5)
    after = quiet.Sample(before.taken_at + 2.0, after.processes)  # a 2-second window
    rows = quiet.busiest(before, after, exclude=quiet.descendants(after, 200))
    assert [(r.pid, r.name, round(r.cores, 3)) for r in rows] == [(100, "my (odd) name", 0.75), (300, "newcomer", 0.125)]
    report = quiet.QuietReport(2.0, 0.5, rows)
    assert not report.quiet and report.other_cores == pytest.approx(0.875)
    assert "busiest: pid 100 my (odd) name (0.75 cores), pid 300 newcomer (0.12 cores)" in report.summary()
    assert quiet.QuietReport(2.0, 1.0, rows).quiet


BUSY = "import time\nend = time.time() + 30\nwhile time.time() < end: pass\n"


def _orphan_busy_loop() -> int:
    """A busy process that is not our descendant (its parent shell exits at once)."""
    out = subprocess.run(["sh", "-c", f'"{sys.executable}" -c "$0" >/dev/null 2>&1 & echo $!', BUSY],
                         capture_output=True, text=True, check=True)
    return int(out.stdout)


def test_a_real_busy_process_is_named_and_refused():
    pid = _orphan_busy_loop()
    try:
        time.sleep(0.2)
        report = quiet.measure_others(window_s=1.0, limit_cores=0.2)
        mine = [p for p in report.busy if p.pid == pid]
        assert mine and mine[0].cores > 0.1 and "python" in mine[0].name
        assert not report.quiet
        with pytest.raises(HotpathError, match=r"machine busy: other processes used .* --allow-busy"):
            quiet.require_quiet(allow_busy=False, log=lambda m: None)
        assert not quiet.require_quiet(allow_busy=True, log=lambda m: None).quiet
    finally:
        os.kill(pid, signal.SIGTERM)


def test_our_own_process_tree_does_not_count():
    child = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        time.sleep(0.2)
        report = quiet.measure_others(window_s=1.0)
        assert child.pid not in {p.pid for p in report.busy}
        assert child.pid in {p.pid for p in quiet.measure_others(window_s=1.0, exclude_tree_of=-1).busy}
    finally:
        child.terminate()
        child.wait()


def test_allow_busy_comes_from_the_environment(monkeypatch):
    from hotpath.cli import build_parser

    monkeypatch.delenv("HOTPATH_ALLOW_BUSY", raising=False)
    assert not build_parser().parse_args(["perf-check"]).allow_busy
    assert build_parser().parse_args(["perf-check", "--allow-busy"]).allow_busy
    monkeypatch.setenv("HOTPATH_ALLOW_BUSY", "1")
    assert build_parser().parse_args(["perf", "--quick"]).allow_busy


# --- the FastAPI alternative speaks what tritonclient / perf_analyzer send ------------------------------------


def test_kserve_binary_round_trip_through_the_real_http_client():
    import tritonclient.http as httpclient

    from perf.lab.compare.alternatives.fastapi_app import decode_request, encode_response

    texts = np.array([["a photo of an astronaut"], ["ünïcode"]], dtype=np.object_)
    inp = httpclient.InferInput("TEXT", [2, 1], "BYTES")
    inp.set_data_from_numpy(texts, binary_data=True)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=True) for n in ("EMBEDDING", "LABELS")]
    body, header_length = httpclient.InferenceServerClient.generate_request_body([inp], outputs=outputs)
    header, values = decode_request(body, str(header_length))
    assert [bytes(v).decode() for v in values] == ["a photo of an astronaut", "ünïcode"]

    embedding = np.arange(8, dtype=np.float32).reshape(2, 4)
    labels = np.array([["cat", "dog"], ["köln", "x"]], dtype=np.object_)
    response = encode_response("m", header, {"EMBEDDING": embedding, "LABELS": labels, "UNWANTED": embedding})
    length = response.headers.get("inference-header-content-length")
    result = httpclient.InferenceServerClient.parse_response_body(response.body, header_length=int(length))
    assert np.array_equal(result.as_numpy("EMBEDDING"), embedding)
    assert [[b.decode() for b in row] for row in result.as_numpy("LABELS")] == [["cat", "dog"], ["köln", "x"]]
    assert result.as_numpy("UNWANTED") is None  # only the requested outputs

    plain = encode_response("m", {"inputs": []}, {"EMBEDDING": embedding})
    assert json.loads(plain.body)["outputs"][0]["data"] == embedding.reshape(-1).tolist()
