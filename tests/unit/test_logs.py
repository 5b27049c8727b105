"""hotpath.logs.configure: hotpath's progress lines look as they did when printed (message only, stdout),
warnings go to stderr, other libraries stay quiet below WARNING, and configuring twice adds nothing."""

import logging

import pytest

from hotpath import logs


@pytest.fixture
def fresh_logging():
    root, loggers = logging.getLogger(), [logging.getLogger(n) for n in ("hotpath", "__main__")]
    handlers, levels = list(root.handlers), [logger.level for logger in loggers]
    yield
    root.handlers[:] = handlers
    for logger, level in zip(loggers, levels):
        logger.setLevel(level)


def test_progress_on_stdout_warnings_on_stderr_message_only(fresh_logging, capsys):
    logs.configure()
    logs.configure()
    logging.getLogger("hotpath.repository_build").info("[build] (1/2) text_encoder [onnx]")
    logging.getLogger("hotpath.stack.serve").error("[serve] tritonserver exited (1)")
    logging.getLogger("__main__").info("[gateway] gRPC 127.0.0.1:8443")   # python -m hotpath.gateway
    logging.getLogger("faiss.loader").info("Loading faiss with AVX2 support.")
    out, err = capsys.readouterr()
    assert out == "[build] (1/2) text_encoder [onnx]\n[gateway] gRPC 127.0.0.1:8443\n", \
        "once each, without level or logger name"
    assert err == "[serve] tritonserver exited (1)\n"


def test_unconfigured_library_logging_prints_nothing(fresh_logging, capsys):
    logging.getLogger().handlers[:] = [h for h in logging.getLogger().handlers if not isinstance(h, logs._Console)]
    logging.getLogger("hotpath.repository_build").info("[build] quiet unless a main() configured logging")
    assert capsys.readouterr() == ("", "")


def test_a_stream_closed_since_the_last_record_is_never_touched(fresh_logging, monkeypatch, tmp_path):
    logs.configure()
    old = (tmp_path / "first.log").open("w")           # a real file: flushing it once closed raises
    monkeypatch.setattr("sys.stdout", old)
    logging.getLogger("hotpath.server.local_triton").info("[serve] first")
    old.close()                                        # what pytest does with a finished test's capture
    new = (tmp_path / "second.log").open("w")
    monkeypatch.setattr("sys.stdout", new)
    logging.getLogger("hotpath.server.local_triton").info("[serve] second")   # raised ValueError before
    new.close()
    assert (tmp_path / "first.log").read_text() == "[serve] first\n"
    assert (tmp_path / "second.log").read_text() == "[serve] second\n"
