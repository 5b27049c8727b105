"""Cold-start helpers: Triton log load spans and the no-warmup repository variant."""

from perf.lab.studies.cold_start import load_spans

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
