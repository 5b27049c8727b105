"""Streaming metrics (TTFT, ITL, tokens/s), the load driver, SLO loading, the report and the FastAPI
alternative's streamer, without a server."""

import threading
import time

import pytest
import torch

from hotpath.errors import HotpathError
from hotpath.sweeps.measure.streaming import (
    StreamRecord,
    markdown_table,
    meets,
    run_load,
    summarize,
)
from hotpath.tuning.slo import StreamingSlo, load_streaming_slos
from perf.lab.compare.alternatives.generation_fastapi import TokenStreamer
from perf.lab.compare.generation import draft_steps, lookup_draft, no_prefix_cache, one_at_a_time, report


def test_summarize_separates_first_token_from_inter_token_gaps():
    records = [StreamRecord([0.1, 0.2, 0.3, 0.4], 0.45), StreamRecord([0.5, 0.55, 0.60], 0.7),
               StreamRecord(error="boom")]
    s = summarize("x", 2, records, wall_s=1.0)
    assert (s.requests, s.errors, s.tokens) == (3, 1, 7)
    assert s.tokens_per_s == pytest.approx(7.0)
    assert s.ttft_p50_ms == pytest.approx(300.0)            # median of 100 and 500 ms
    assert s.itl_p50_ms == pytest.approx(100.0)             # gaps: 100, 100, 100, 50, 50
    assert s.itl_p95_ms == pytest.approx(100.0)
    assert s.latency_p95_ms == pytest.approx(687.5)


def test_run_load_overlaps_workers_and_keeps_failures():
    active, peak, lock = [0], [0], threading.Lock()

    def send(prompt):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        if prompt.startswith("Explain"):
            raise RuntimeError("server said no")
        return StreamRecord([0.01, 0.02], 0.03)

    records, wall = run_load(send, concurrency=4, rounds=2)
    assert len(records) == 8 and peak[0] == 4
    assert sum(r.error is not None for r in records) == 1 and "server said no" in [r.error for r in records if r.error][0]
    assert 0.09 <= wall < 1.0  # two rounds of 50 ms, in parallel


def test_streaming_slos_come_from_their_own_table(tmp_path):
    slo = tmp_path / "slo.toml"
    slo.write_text("[profiles.cpu.endpoints.text_embedding]\np95_ms = 25.0\n"
                   "[profiles.cpu.streaming.text_generation]\nttft_p95_ms = 900\nitl_p95_ms = 150\nconcurrency = 8\n")
    got = load_streaming_slos("cpu", slo)
    assert got == {"text_generation": StreamingSlo("text_generation", 900.0, 150.0, 8)}
    slo.write_text("[profiles.cpu.streaming.text_generation]\nttft_p95_ms = 900\n")
    with pytest.raises(HotpathError, match="itl_p95_ms"):
        load_streaming_slos("cpu", slo)


def test_the_repository_slo_file_has_generation_targets():
    slos = load_streaming_slos("cpu")
    assert slos["text_generation"].ttft_p95_ms > 0 and slos["text_generation"].concurrency == 8


def test_report_gives_the_batching_ratio_and_the_slo_verdict():
    def stats(label, c, tokens, ttft=(0.2,), gap=0.05):
        times = [t + gap * i for t in ttft for i in range(tokens)]
        return summarize(label, c, [StreamRecord(times, times[-1])], wall_s=1.0)

    rows = [stats("hotpath", 8, 90), stats("one-at-a-time", 8, 30), stats("fastapi-transformers", 8, 20)]
    text = report(rows, StreamingSlo("text_generation", 300, 60, 8), "settings")
    assert "hotpath 90.0 tok/s = 3.00x one-at-a-time, 4.50x FastAPI + transformers" in text
    assert "**MET**" in text and text.count("| hotpath |") == 1
    assert not meets(rows[0], StreamingSlo("text_generation", 100, 60, 8))
    assert markdown_table(rows).count("\n") == len(rows) + 2


def test_one_at_a_time_sets_a_single_slot_and_no_prefix_cache_turns_it_off():
    from tritonclient.grpc import model_config_pb2 as mc

    from hotpath.runtime.llm.settings import from_parameters

    config = mc.ModelConfig(name="text_generation")
    config.parameters["max_num_seqs"].string_value = "8"
    assert one_at_a_time(config).parameters["max_num_seqs"].string_value == "1"
    off = no_prefix_cache(mc.ModelConfig(name="text_generation"))
    settings = from_parameters({k: v.string_value for k, v in off.parameters.items()})  # keys the engine accepts
    assert settings.enable_prefix_caching is False


def test_prompt_lookup_draft_and_its_pass_count():
    assert lookup_draft([1, 2, 3, 9, 1, 2, 3], k=4) == [9, 1, 2, 3]     # the latest earlier 3-gram's successors
    assert lookup_draft([4, 1, 2, 5, 2], k=2) == [5, 2]                 # falls back to the last token alone
    assert lookup_draft([5, 6, 7], k=2) == []
    # 7 tokens: a pass with no draft, a pass accepting 4 copied tokens (+1 own), a pass whose draft fails.
    assert draft_steps([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 7], k=4) == 3
    assert draft_steps([9], [1, 2, 3], k=4) == 3                        # nothing to copy: one token per pass


def test_token_streamer_skips_the_prompt_and_stop_tokens():
    streamer = TokenStreamer(stop_ids={2})

    def produce():
        streamer.put(torch.tensor([[5, 6, 7]]))  # the prompt
        for t in (11, 12, 2):
            streamer.put(torch.tensor([t]))
        streamer.end()

    threading.Thread(target=produce).start()
    assert list(streamer) == [11, 12]
