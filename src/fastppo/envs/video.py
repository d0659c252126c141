"""MP4 writing with imageio (+ imageio-ffmpeg), shared by ``fastppo record`` and ``--capture-video``.

gymnasium's own RecordVideo needs moviepy; imageio is lighter and streams frames to ffmpeg, so
a long episode never sits in memory.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, SupportsFloat

import gymnasium as gym
import numpy as np

from fastppo.errors import FastPPOError, install_extra
from fastppo.files.outputs import output_file

if TYPE_CHECKING:
    from imageio.core.format import Format

DEFAULT_FPS = 30
SUFFIXES = (".mp4", ".mkv", ".mov", ".avi")
"""The containers ffmpeg writes H.264 (libx264) into."""


class VideoWriter:
    """Frames (H, W, 3 uint8) in, one MP4 out. Use as a context manager or call ``close``."""

    def __init__(self, path: str | Path, fps: float = DEFAULT_FPS):
        try:
            import imageio.v2 as imageio
        except ImportError:
            raise FastPPOError(f"writing videos needs imageio and imageio-ffmpeg: {install_extra('video')}") from None
        # rgb_array rendering needs no display; without this, pygame's SDL probes for one when the
        # env closes and prints an error on headless machines.
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        self.path = output_file(path, "the video", SUFFIXES)
        self.frames = 0
        # macro_block_size=2: libx264/yuv420p only needs even sizes (CartPole's 600x400 stays as is).
        self._writer: Format.Writer | None = imageio.get_writer(
            str(self.path), fps=fps, codec="libx264", macro_block_size=2, ffmpeg_log_level="error"
        )

    def append(self, frame: Any) -> None:
        if frame is None:
            raise FastPPOError("the env rendered no frame: it must support render_mode='rgb_array' to be recorded")
        assert self._writer is not None, "a frame after close()"
        self._writer.append_data(np.asarray(frame, dtype=np.uint8))
        self.frames += 1

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def env_fps(env: gym.Env) -> float:
    return float(env.metadata.get("render_fps") or DEFAULT_FPS)


def capped_cubic_schedule(episode_id: int) -> bool:
    """Episodes 0, 1, 8, 27, ..., 729, then every 1000th (gymnasium's RecordVideo default)."""
    if episode_id < 1000:
        return round(episode_id ** (1 / 3)) ** 3 == episode_id
    return episode_id % 1000 == 0


class RecordEpisodeVideo(gym.Wrapper):
    """Writes the episodes that ``episode_trigger`` picks to ``video_dir/episode-000008.mp4``.

    The env must be made with ``render_mode="rgb_array"``. ``episode_id`` is a plain int, so a
    checkpoint's env snapshot carries it and a resumed run continues the numbering.
    """

    def __init__(
        self, env: gym.Env, video_dir: str | Path, episode_trigger: Callable[[int], bool] = capped_cubic_schedule
    ):
        super().__init__(env)
        self.video_dir = Path(video_dir)
        self.episode_trigger = episode_trigger
        self.episode_id = -1
        self._video: VideoWriter | None = None

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self._finish()
        self.episode_id += 1
        if self.episode_trigger(self.episode_id):
            self._video = VideoWriter(self.video_dir / f"episode-{self.episode_id:06d}.mp4", env_fps(self.env))
            self._video.append(self.env.render())
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self._video is not None:
            self._video.append(self.env.render())
            if terminated or truncated:
                self._finish()
        return obs, reward, terminated, truncated, info

    def _finish(self) -> None:
        if self._video is not None:
            self._video.close()
            self._video = None

    def close(self) -> None:
        self._finish()
        super().close()
