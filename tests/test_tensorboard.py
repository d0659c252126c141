"""fastppo.tensorboard.EventWriter writes what torch's SummaryWriter writes, as TensorBoard reads it."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_file_loader import EventFileLoader, RawEventFileLoader  # noqa: E402
from tensorboard.compat.proto import event_pb2  # noqa: E402
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as tensorboard_crc  # noqa: E402

from fastppo.logger import RunLogger  # noqa: E402
from fastppo.tensorboard import EventWriter, masked_crc32c  # noqa: E402

METRICS = {"charts/SPS": 30000.5, "losses/approx_kl": 0.0123, "losses/explained_variance": float("nan"), "charts/big": 1e30, "losses/epochs": 4}


def records(path) -> list:
    return [event_pb2.Event.FromString(r) for r in RawEventFileLoader(str(path)).Load()]


def events(log_dir, raw: bool) -> list:
    """Every record of the one event file in ``log_dir``, wall times and writer names left out;
    summaries as (step, serialized value) per value, the rest as serialized events."""
    [path] = log_dir.glob("events.out.tfevents.*")
    loaded = records(path) if raw else list(EventFileLoader(str(path)).Load())
    out = []
    for event in loaded:
        event.wall_time = 0
        event.ClearField("source_metadata")
        if event.HasField("summary"):
            out += [(event.step, value.SerializeToString()) for value in event.summary.value]
        else:
            out.append(event.SerializeToString())
    return out


@pytest.mark.parametrize("purge_step", [None, 2048])
def test_event_writer_writes_summary_writers_records(tmp_path, purge_step):
    from torch.utils.tensorboard import SummaryWriter

    theirs, ours = SummaryWriter(str(tmp_path / "torch"), purge_step=purge_step), EventWriter(tmp_path / "fastppo", purge_step=purge_step)
    for writer in (theirs, ours):
        writer.add_text("hyperparameters", "|param|value|\n|-|-|\n|ppo.learning_rate|0.01|")
    for step in (1024, 2048, 2**40):
        for name, value in METRICS.items():
            theirs.add_scalar(name, value, step)
        ours.add_scalars(step, METRICS)
    theirs.close()
    ours.close()
    for raw in (True, False):  # as stored, and as TensorBoard migrates it for its dashboards
        expected = events(tmp_path / "torch", raw)
        assert events(tmp_path / "fastppo", raw) == expected and len(expected) == 3 * len(METRICS) + 2 + 2 * (purge_step is not None)


def test_masked_crc32c_is_tensorboards():
    data = os.urandom(1000)
    assert [masked_crc32c(data[:n]) for n in (0, 1, 8, 999)] == [tensorboard_crc(data[:n]) for n in (0, 1, 8, 999)]


def test_run_logger_events_are_live_and_resume_purges(tmp_path):
    logger = RunLogger(tmp_path, 4096, tensorboard=True, progress=False, config={"ppo": {"learning_rate": 0.01}})
    logger.log(1024, {"charts/SPS": 1.0})
    [first] = tmp_path.glob("events.out.tfevents.*")
    # flushed at each step: a live TensorBoard sees the iteration before the run ends
    assert [(e.step, e.WhichOneof("what")) for e in records(first)] == [(0, "file_version"), (0, "summary"), (1024, "summary")]
    logger.close()
    resumed = RunLogger(tmp_path, 4096, tensorboard=True, progress=False, purge_step=1025)
    resumed.log(2048, {"charts/SPS": 2.0})
    resumed.close()
    [second] = set(tmp_path.glob("events.out.tfevents.*")) - {first}
    assert [(e.step, e.WhichOneof("what")) for e in records(second)] == [(0, "file_version"), (1025, "file_version"), (1025, "session_log"), (2048, "summary")]
