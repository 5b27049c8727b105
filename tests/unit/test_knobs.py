"""Tuning knobs: ladders, reading and applying them on configs, writing them into specs."""

import shutil
import tomllib

import pytest
import tomlkit

from hotpath import paths
from hotpath.errors import SpecError
from hotpath.specs.repository import read_config
from hotpath.sweeps.tune.spec_writer import write_back
from hotpath.tuning.knobs import KNOBS, QueueDelay, apply_knobs, knob, knobs_for, read_knobs, write_knobs


def test_neighbors_are_one_rung_away_or_the_closest_rung():
    q = QueueDelay()
    ladder = (0, 500, 1000)
    assert q.neighbors(500, ladder) == [0, 1000]
    assert q.neighbors(0, ladder) == [500]
    assert q.neighbors(700, ladder) == [500]


def test_which_knobs_apply_to_which_step():
    encoder = read_config(paths.model_repository() / "text_encoder")
    names = [k.name for k in knobs_for(encoder)]
    assert names[:3] == ["max_queue_delay_microseconds", "preferred_batch_size", "instance_count"]
    assert "intra_op_thread_count" in names and "pad_to_multiple_of" not in names
    unbatched = read_config(paths.model_repository() / "text_encoder")
    unbatched.max_batch_size = 0
    assert "max_queue_delay_microseconds" not in [k.name for k in knobs_for(unbatched)]
    # Preferred sizes never exceed max_batch_size.
    encoder.max_batch_size = 8
    assert all(max(s, default=0) <= 8 for s in knob("preferred_batch_size").ladder(encoder))


def test_every_knob_round_trips_through_a_config_without_touching_the_original():
    encoder = read_config(paths.model_repository() / "text_encoder")
    encoder.parameters["pad_to_multiple_of"].string_value = "16"
    encoder.parameters["max_length"].string_value = "256"
    encoder.parameters["one_text_thread_count"].string_value = "1"
    encoder.parameters["spin_duration_us"].string_value = "0"
    start = read_knobs(encoder)
    assert set(start) == {k.name for k in KNOBS}
    # A value other than the current one from each knob's ladder.
    moved = {k.name: next(v for v in k.ladder(encoder) if v != start[k.name]) for k in KNOBS}
    applied = apply_knobs(encoder, moved)
    assert read_knobs(applied) == moved
    assert read_knobs(encoder) == start
    assert 24 not in knob("pad_to_multiple_of").ladder(encoder) and 32 in knob("pad_to_multiple_of").ladder(encoder)
    encoder.parameters["max_length"].string_value = "200"   # 16 and 32 do not divide it: off the ladder
    assert knob("pad_to_multiple_of").ladder(encoder) == (0, 8)


def test_unset_preferred_sizes_read_as_no_preference():
    encoder = read_config(paths.model_repository() / "text_encoder")
    encoder.dynamic_batching.ClearField("preferred_batch_size")
    encoder.dynamic_batching.preferred_batch_size.append(encoder.max_batch_size)   # how Triton reports "unset"
    assert knob("preferred_batch_size").read(encoder) == ()


@pytest.fixture()
def spec_dir(tmp_path):
    d = tmp_path / "build"
    shutil.copytree(paths.model_specs_dir(), d)
    return d


def test_write_back_changes_only_knobs_and_keeps_comments(spec_dir):
    path = spec_dir / "text_encoder.toml"
    before_text = path.read_text()
    before = tomllib.loads(before_text)
    delay = before["dynamic_batching"]["max_queue_delay_microseconds"]
    threads = before["parameters"]["intra_op_thread_count"]
    new_delay, new_threads = delay + 250, threads + 1
    changes = write_back("text_encoder", {"max_queue_delay_microseconds": new_delay, "preferred_batch_size": (4, 8),
                                          "instance_count": before["instance_group"][0]["count"],
                                          "intra_op_thread_count": new_threads}, spec_dir)
    after = tomllib.loads(path.read_text())
    assert f"dynamic_batching.max_queue_delay_microseconds: {delay} -> {new_delay}" in changes
    assert f"parameters.intra_op_thread_count: {threads} -> {new_threads}" in changes
    assert not any(c.startswith("instance_group") for c in changes)   # unchanged value, no change
    assert after["dynamic_batching"]["preferred_batch_size"] == [4, 8]
    assert after["parameters"]["intra_op_thread_count"] == new_threads
    comments = [line for line in before_text.splitlines() if line.startswith("#")]
    assert comments and all(c in path.read_text() for c in comments)
    # Everything that is not a knob is untouched.
    for key in ("input", "output", "hotpath", "max_batch_size"):
        assert after[key] == before[key]


def test_write_back_leaves_knobs_the_tuner_did_not_move(spec_dir):
    """Someone edited the spec while tuning ran: only the knobs tuning moved are written."""
    path = spec_dir / "tokenizer.toml"
    doc = tomlkit.parse(path.read_text())
    count = doc["instance_group"][0]["count"]
    doc["dynamic_batching"]["max_queue_delay_microseconds"] = 777   # the concurrent edit
    path.write_text(tomlkit.dumps(doc))
    start = {"max_queue_delay_microseconds": 500, "instance_count": count}
    changes = write_back("tokenizer", {"max_queue_delay_microseconds": 500, "instance_count": count + 1},
                         spec_dir, start)
    assert changes == [f"instance_group[0].count: {count} -> {count + 1}"]
    after = tomllib.loads(path.read_text())
    assert after["dynamic_batching"]["max_queue_delay_microseconds"] == 777
    assert after["instance_group"][0]["count"] == count + 1


def test_write_back_refuses_an_invalid_result(spec_dir):
    before = (spec_dir / "text_encoder.toml").read_text()
    with pytest.raises(SpecError, match="preferred_batch_size"):
        write_back("text_encoder", {"preferred_batch_size": (64,)}, spec_dir)
    assert (spec_dir / "text_encoder.toml").read_text() == before


def test_removing_preferred_sizes_deletes_the_field():
    doc = tomlkit.parse("[dynamic_batching]\npreferred_batch_size = [8, 16]\nmax_queue_delay_microseconds = 100\n")
    changes = write_knobs(doc, {"preferred_batch_size": ()})
    assert changes == ["dynamic_batching.preferred_batch_size: [8, 16] -> (none)"]
    assert "preferred_batch_size" not in doc["dynamic_batching"]
    assert write_knobs(doc, {"preferred_batch_size": ()}) == []
    with pytest.raises(KeyError, match="unknown knob"):
        write_knobs(doc, {"warp_speed": 9})
