"""A user's own problem, registered nowhere: an environment and a network in
a module of their own, which ActorQ-TF trains from a gin file alone
(examples/corridor.gin; README, "Your own environment").

The agent walks a corridor of `length` cells from its left end; reaching the
right end pays 1 and ends the episode, every step costs 0.01.
"""
import numpy as np
import tensorflow as tf
from tf_agents.environments import py_environment
from tf_agents.networks import sequential
from tf_agents.specs import array_spec
from tf_agents.trajectories import time_step as ts


class Corridor(py_environment.PyEnvironment):
  """Observations: the position and the distance to the goal, as a dict of
  float32 vectors (ActorQ-TF flattens them into one). Actions: 0 left,
  1 right."""

  def __init__(self, length: int = 8):
    super().__init__()
    self._length = length
    self._position = 0

  def observation_spec(self):
    return {'position': array_spec.ArraySpec((1,), np.float32),
            'to_goal': array_spec.ArraySpec((1,), np.float32)}

  def action_spec(self):
    return array_spec.BoundedArraySpec((), np.int64, minimum=0, maximum=1)

  def _observation(self):
    return {'position': np.array([self._position], np.float32),
            'to_goal': np.array([self._length - 1 - self._position],
                                np.float32)}

  def _reset(self):
    self._position = 0
    return ts.restart(self._observation())

  def _step(self, action):
    if self.current_time_step().is_last():
      return self.reset()
    self._position = max(0, self._position + (1 if action == 1 else -1))
    if self._position == self._length - 1:
      return ts.termination(self._observation(), np.float32(1.0))
    return ts.transition(self._observation(), np.float32(-0.01))


def q_network(observation_spec, action_spec):
  """A TF-Agents Sequential of Keras layers: observation -> Q-values."""
  num_actions = int(action_spec.maximum - action_spec.minimum + 1)
  return sequential.Sequential(
      [tf.keras.layers.Dense(32, activation='relu'),
       tf.keras.layers.Dense(32, activation='relu'),
       tf.keras.layers.Dense(num_actions)],
      input_spec=observation_spec)
