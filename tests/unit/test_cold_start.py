"""Cold-start helpers: Triton log load spans and the no-warmup repository variant."""

from hotpath import paths
from hotpath.perf.studies.cold_start import load_spans, without_warmup
from hotpath.repository import read_config

LOG = '''I1130 06:40:58.044659 25267 model_lifecycle.cc:472] "loading: image_classifier:1"
I1130 06:40:58.046602 25267 model_lifecycle.cc:472] "loading: tokenizer:1"
I1130 06:41:05.785476 25267 model_lifecycle.cc:839] "successfully loaded 'tokenizer'"
W1130 06:41:05.900000 25267 pinned_memory_manager.cc:273] "Unable to allocate pinned system memory"
I1130 06:41:06.040859 25267 model_lifecycle.cc:839] "successfully loaded 'image_classifier'"
'''


def test_load_spans_from_triton_log():
    spans = load_spans(LOG, year=2026)
    assert set(spans) == {"image_classifier", "tokenizer"}
    start, end = spans["tokenizer"]
    assert abs((end - start) - 7.738874) < 1e-6
    assert abs((spans["image_classifier"][1] - spans["image_classifier"][0]) - 7.9962) < 1e-6


def test_without_warmup_drops_only_the_warmup(tmp_path):
    repo = paths.model_repository()
    with_warmup = [m for m in ("text_encoder", "image_classifier") if read_config(repo / m).model_warmup]
    assert with_warmup, "the committed repository warms its ONNX models up"
    target = without_warmup(repo, tuple(with_warmup), tmp_path)
    for m in with_warmup:
        bare, original = read_config(target / m), read_config(repo / m)
        assert not bare.model_warmup
        original.ClearField("model_warmup")
        assert bare == original
        assert (target / m / "1").resolve() == (repo / m / "1").resolve()
