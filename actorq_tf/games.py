"""Small pixel games that the project renders itself: uint8 image
observations with no ROM, data or download, for int8 convolutional policies.
"""
import gin
import numpy as np
from tf_agents.environments import py_environment
from tf_agents.specs import array_spec
from tf_agents.trajectories import time_step as ts


@gin.configurable
class Catch(py_environment.PyEnvironment):
  """A ball falls from a random column of the top row, one row per step;
  the paddle on the bottom row moves left, stays or moves right. The
  episode ends when the ball reaches the bottom row: +1 if the paddle is
  under it, -1 if not. (The task of bsuite's Catch, rendered as an image.)

  Observations are `rows` x `columns` x `frames` uint8 images: the ball and
  the paddle at 255, the rest 0, the newest frame last.

  Args:
    rows, columns: the board's size in pixels.
    frames: how many of the newest frames each observation stacks (1: the
      ball's position alone; its motion is always straight down).
    seed: the generator of the ball's columns (`seed()` resets it).
  """

  BRIGHT = 255

  def __init__(self, rows: int = 10, columns: int = 5, frames: int = 1,
               seed: int = 0):
    super().__init__()
    if rows < 2 or columns < 1 or frames < 1:
      raise ValueError(f'Catch needs rows >= 2, columns >= 1 and frames >= '
                       f'1, not {rows}, {columns}, {frames}')
    self._rows, self._columns, self._frames = rows, columns, frames
    self._rng = np.random.default_rng(seed)
    self._observation = np.zeros((rows, columns, frames), np.uint8)
    self._ball_row = self._ball_column = self._paddle = 0
    self._done = True

  def observation_spec(self):
    return array_spec.BoundedArraySpec(
        (self._rows, self._columns, self._frames), np.uint8, minimum=0,
        maximum=self.BRIGHT, name='pixels')

  def action_spec(self):
    return array_spec.BoundedArraySpec((), np.int32, minimum=0, maximum=2,
                                       name='left_stay_right')

  def seed(self, seed):
    self._rng = np.random.default_rng(seed)

  def _render(self, first: bool) -> np.ndarray:
    frame = np.zeros((self._rows, self._columns), np.uint8)
    frame[self._ball_row, self._ball_column] = self.BRIGHT
    frame[-1, self._paddle] = self.BRIGHT
    if first:
      self._observation[:] = frame[..., None]
    else:
      self._observation[..., :-1] = self._observation[..., 1:]
      self._observation[..., -1] = frame
    return self._observation.copy()

  def _reset(self):
    self._ball_row = 0
    self._ball_column = int(self._rng.integers(self._columns))
    self._paddle = self._columns // 2
    self._done = False
    return ts.restart(self._render(first=True))

  def _step(self, action):
    if self._done:
      return self.reset()
    self._paddle = int(np.clip(self._paddle + int(action) - 1, 0,
                               self._columns - 1))
    self._ball_row += 1
    observation = self._render(first=False)
    if self._ball_row < self._rows - 1:
      return ts.transition(observation, np.float32(0.0))
    self._done = True
    caught = self._paddle == self._ball_column
    return ts.termination(observation, np.float32(1.0 if caught else -1.0))
