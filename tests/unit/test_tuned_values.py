"""The hardware key and per-host tuned values: a result measured elsewhere is foreign and left unused."""

import json

import pytest

from hotpath import paths
from hotpath.specs.repository import read_config
from hotpath.sweeps.tune.quick import overrides
from hotpath.tuning.hardware_key import FEATURES, HardwareKey, parse_cpuinfo
from hotpath.tuning.tuned_values import TunedValues, judge, load

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R14 96-Core Processor
flags\t\t: fpu sse2 avx2 avx512f avx512_vnni avx512_bf16 sha_ni
processor\t: 1
model name\t: AMD EPYC 9R14 96-Core Processor
flags\t\t: fpu sse2 avx2 avx512f avx512_vnni avx512_bf16 sha_ni
"""
AVX2_ONLY = CPUINFO.replace(" avx512f avx512_vnni avx512_bf16", "").replace("9R14 96-Core", "7B13 64-Core")


def test_key_reads_model_and_the_features_kernels_depend_on():
    model, flags = parse_cpuinfo(CPUINFO)
    assert model == "AMD EPYC 9R14 96-Core Processor" and "sha_ni" in flags
    key = HardwareKey.detect(CPUINFO, cores=2, gpu="")
    assert key.features == ("avx2", "avx512f", "avx512_vnni", "avx512_bf16")
    assert set(key.features) <= set(FEATURES)
    assert "avx512f" in key.describe() and "2 cores" in key.describe()


def test_keys_differ_by_cpu_features_cores_and_gpu():
    base = HardwareKey.detect(CPUINFO, cores=2, gpu="")
    assert HardwareKey.detect(CPUINFO, cores=2, gpu="") == base
    others = [HardwareKey.detect(AVX2_ONLY, cores=2, gpu=""), HardwareKey.detect(CPUINFO, cores=4, gpu=""),
              HardwareKey.detect(CPUINFO, cores=2, gpu="NVIDIA H200")]
    assert all(o != base and o.digest != base.digest for o in others)
    assert any(d.startswith("features:") for d in others[0].differences(base))
    assert HardwareKey.from_dict(json.loads(json.dumps(base.to_dict()))) == base


def test_this_host_has_a_key():
    here = HardwareKey.detect()
    assert here.cores >= 1 and len(here.digest) == 12


def test_foreign_values_are_not_applied_and_say_why(tmp_path):
    here = HardwareKey.detect(CPUINFO, cores=2, gpu="")
    elsewhere = HardwareKey.detect(AVX2_ONLY, cores=2, gpu="")
    knobs = {"sentence_embedder": {"one_text_thread_count": 1}}
    path = TunedValues(elsewhere, knobs, "then").save(tmp_path / "tuned.json")
    verdict = judge(load(path), here, path)
    assert verdict.state == "foreign" and verdict.models == {}
    assert "FOREIGN" in verdict.message and "hotpath tune --quick" in verdict.message
    assert "7B13" in verdict.message and "avx512f" in verdict.message
    TunedValues(here, knobs, "now").save(path)
    verdict = judge(load(path), here, path)
    assert verdict.state == "match" and verdict.models == knobs
    assert judge(None, here).state == "none"


def test_unreadable_file_means_defaults(tmp_path):
    (tmp_path / "tuned.json").write_text("{not json")
    assert load(tmp_path / "tuned.json") is None
    assert load(tmp_path / "absent.json") is None


def test_overrides_keep_only_what_differs_from_the_committed_specs():
    default = {"max_queue_delay_microseconds": 0, "one_text_thread_count": 2}
    state = {"sentence_embedder": default}
    committed = overrides(state)
    read = read_config(paths.model_repository() / "sentence_embedder")
    if read.parameters["one_text_thread_count"].string_value == "2":
        assert committed == {}
    moved = overrides({"sentence_embedder": {**default, "one_text_thread_count": 4}})
    assert moved == {"sentence_embedder": {"one_text_thread_count": 4}}


@pytest.mark.parametrize("us,expected", [("0", (False, None)), ("250", (True, 250))])
def test_spin_settings(us, expected):
    from hotpath.runtime.parameters import OrtParameters

    got = OrtParameters.parse({"spin_duration_us": us}).spin_settings()
    assert (got["allow_spinning"], got["spin_duration_us"]) == expected
    assert OrtParameters.parse({"allow_spinning": "true"}).spin_settings() == {"allow_spinning": True,
                                                                               "spin_duration_us": None}


def test_start_tune_keeps_the_committed_layout_within_noise():
    from hotpath.tuning.start_tune import choose

    committed = (2, 0)
    assert choose({(1, 0): 10.0, (2, 0): 10.3}, committed) == committed     # 3% slower: noise, kept
    assert choose({(1, 0): 10.0, (2, 0): 12.0}, committed) == (1, 0)        # 20% slower: moved
    assert choose({(1, 0): 10.0, (4, 0): 9.0}, committed) == (4, 0)         # committed not measurable here
