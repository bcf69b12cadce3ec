"""The exploration actors add to their policy's actions, in Python, how it
spreads across actors, the policy wrapper that adds it, and the novelty
bonus they may add to rewards."""
import math
from typing import Callable, Dict, Optional, Sequence

import gin
import numpy as np
from tf_agents.policies import py_policy
from tf_agents.trajectories import policy_step

from actorq_tf import metrics
from actorq_tf.errors import ActorQError
from actorq_tf.normalization import ObservationNormalizer


@gin.configurable
def actor_epsilon(actor_index: int, num_actors: int,
                  base_epsilon: float = 0.05, alpha: float = 3.0) -> float:
  """Ape-X's spread: actor i explores with base**(1 + alpha * i / (N - 1))."""
  if num_actors <= 1:
    return base_epsilon
  return base_epsilon ** (1 + alpha * actor_index / (num_actors - 1))


@gin.configurable
def actor_sigma(actor_index: int, num_actors: int, sigma: float = 0.3,
                spread: float = 2.0) -> float:
  """Exploration noise of actor i: ActorQ spreads it across actors.

  With N > 1 actors the sigmas are spaced geometrically from sigma * spread
  (actor 0) to sigma / spread (actor N - 1); one actor uses `sigma`.
  """
  if num_actors <= 1 or spread == 1.0:
    return sigma
  return sigma * spread ** (1.0 - 2.0 * actor_index / (num_actors - 1))


class EpsilonGreedy:
  """Epsilon-greedy exploration in the actor's Python, per-actor generator.

  Epsilon decays linearly from `initial_epsilon` to `final_epsilon` over
  `decay_steps` env steps of this actor. With `repeat_exponent` > 1 a random
  action is held for n steps, n drawn from a zeta distribution of that
  exponent and capped at `max_repeat` (epsilon-z-greedy, Dabney et al. 2020,
  "Temporally-extended epsilon-greedy exploration"): a run of one action
  goes where single random steps cancel out, as MountainCar's valley needs.
  """

  def __init__(self, num_actions: int, final_epsilon: float,
               initial_epsilon: float = 1.0, decay_steps: int = 0,
               seed: int = 0, repeat_exponent: float = 0.0,
               max_repeat: int = 100):
    if repeat_exponent and repeat_exponent <= 1.0:
      raise ActorQError('a zeta distribution needs an exponent above 1, '
                        f'not {repeat_exponent}')
    self._num_actions = num_actions
    self._initial = initial_epsilon
    self._final = final_epsilon
    self._decay_steps = decay_steps
    self._rng = np.random.default_rng(seed)
    self._repeat_exponent = repeat_exponent
    self._max_repeat = max_repeat
    self._repeated_action = 0
    self._repeats_left = 0

  def epsilon(self, step: int) -> float:
    if self._decay_steps <= 0 or step >= self._decay_steps:
      return self._final
    fraction = step / self._decay_steps
    return self._initial + fraction * (self._final - self._initial)

  def act(self, greedy_action: Optional[int], step: int) -> int:
    """The greedy action, or with probability epsilon (always before the
    first model) a uniformly random one, held for a while if so set."""
    if self._repeats_left > 0:
      self._repeats_left -= 1
      return self._repeated_action
    if greedy_action is not None and self._rng.random() >= self.epsilon(step):
      return greedy_action
    action = int(self._rng.integers(self._num_actions))
    if self._repeat_exponent:
      self._repeated_action = action
      self._repeats_left = min(int(self._rng.zipf(self._repeat_exponent)),
                               self._max_repeat) - 1
    return action

  def summary(self, step: int) -> Dict[str, float]:
    return {'epsilon': self.epsilon(step)}


class GaussianNoise:
  """Gaussian exploration for continuous actions, per-actor generator.

  `sigma` is in units of half the action range, so one value suits any
  bounds; noisy actions are clipped to the bounds. Before the first model
  arrives actions are uniform within the bounds.
  """

  def __init__(self, action_spec, sigma: float, seed: int = 0):
    self._minimum = np.broadcast_to(action_spec.minimum, action_spec.shape
                                   ).astype(action_spec.dtype)
    self._maximum = np.broadcast_to(action_spec.maximum, action_spec.shape
                                   ).astype(action_spec.dtype)
    self._stddev = sigma * (self._maximum - self._minimum) / 2
    self.sigma = sigma
    self._rng = np.random.default_rng(seed)

  def act(self, action: Optional[np.ndarray], step: int) -> np.ndarray:
    del step  # The noise does not decay.
    if action is None:
      return self._rng.uniform(self._minimum, self._maximum).astype(
          self._minimum.dtype)
    noisy = action + self._stddev * self._rng.standard_normal(
        self._stddev.shape)
    return np.clip(noisy, self._minimum, self._maximum).astype(
        self._minimum.dtype)

  def summary(self, step: int) -> Dict[str, float]:
    del step
    return {'sigma': self.sigma}


class ExploringPyPolicy(py_policy.PyPolicy):
  """A greedy policy with explorers (`EpsilonGreedy`, `GaussianNoise`)
  around it: TF-Agents' collect policy to a greedy policy.

  One explorer per environment that the policy acts in: `act` takes one
  observation (the first explorer's), `act_batch` one observation per
  explorer, in their order, with one call of the greedy policy for all.
  The greedy policy gives `greedy_actions(observations)`, None while it
  has no model; the explorers then act at random, and those env steps are
  counted in `steps_without_model`. The explorers' schedules run on
  `steps`, the steps of each environment so far.
  """

  def __init__(self, greedy, explorers: Sequence, first_step: int = 0,
               steps_without_model: int = 0):
    if not explorers:
      raise ActorQError('an exploring policy needs an explorer per '
                        'environment, and got none')
    self.greedy = greedy
    self.steps = first_step
    self.steps_without_model = steps_without_model
    self._explorers = list(explorers)
    self._action_dtype = greedy.action_spec.dtype
    super().__init__(greedy.time_step_spec, greedy.action_spec)

  @property
  def environments(self) -> int:
    return len(self._explorers)

  def act_batch(self, observations: np.ndarray) -> np.ndarray:
    """The actions for a batch of observations, one per explorer: what an
    actor's loop calls once per step of its environments."""
    greedy_actions = self.greedy.greedy_actions(observations)
    if greedy_actions is None:
      self.steps_without_model += len(observations)
      greedy_actions = (None,) * len(observations)
    actions = np.asarray(
        [explorer.act(action, self.steps)
         for explorer, action in zip(self._explorers, greedy_actions)],
        self._action_dtype)
    self.steps += 1
    return actions

  def act(self, observation: np.ndarray) -> np.ndarray:
    """The action for one observation: what `action` returns, without
    TF-Agents' time step and policy step around it."""
    return self.act_batch(observation[None])[0, ...]  # an array, as specs are

  def _action(self, time_step, policy_state):
    return policy_step.PolicyStep(self.act(time_step.observation),
                                  policy_state, ())

  def summary(self) -> Dict[str, float]:
    """The explorers' figures now (epsilon, sigma), averaged over the
    environments."""
    return metrics.mean_figures([explorer.summary(self.steps)
                                 for explorer in self._explorers])


@gin.configurable
class CountBonus:
  """A count-based novelty bonus on the rewards an actor sends to replay.

  Observations are normalized and cut into cells of `cell_size` (in
  units of the normalizer's scale, as tile coding does); the n-th visit of
  a cell earns `scale / sqrt(n)` (the bonus of MBIE-EB, Strehl and Littman
  2008). Q-learning then values the way to cells seen less: directed
  exploration, where epsilon-greedy only dithers. Made for
  low-dimensional observations such as MountainCar's; a cell grid of many
  dimensions has too many cells to count. Episode returns, evaluations and
  the target stay the environment's own. Counts are the actor's and start
  afresh when it restarts.

  Args:
    example_observations: called once, if enabled: observations whose
      mean and spread set the normalization (e.g. a random walk's).
    scale: the first visit's bonus; 0 disables it.
    cell_size: a cell's width in normalized units.
    decay_steps: the scale falls linearly to 0 over this many env steps of
      the actor, so that late learning fits the environment's rewards alone;
      0 keeps it.
  """

  def __init__(self, example_observations: Callable[[], np.ndarray],
               scale: float = 0.0, cell_size: float = 0.5,
               decay_steps: int = 0):
    if scale < 0 or cell_size <= 0 or decay_steps < 0:
      raise ActorQError(f'a count bonus needs scale >= 0, cell_size > 0 and '
                        f'decay_steps >= 0, not {scale}, {cell_size} and '
                        f'{decay_steps}')
    self.scale = scale
    self._decay_steps = decay_steps
    self._normalizer = (
        ObservationNormalizer.from_observations(example_observations())
        if scale > 0 else None)
    self._cell_size = cell_size
    self._counts: Dict[tuple, int] = {}
    self._total = 0.0
    self._steps = 0

  @property
  def enabled(self) -> bool:
    return self.scale > 0

  def __call__(self, observation: np.ndarray, step: int) -> float:
    """The bonus for reaching `observation` at the actor's env step `step`
    (counted as a visit)."""
    cell = tuple(np.floor(self._normalizer(observation) / self._cell_size
                         ).astype(np.int64).tolist())
    count = self._counts.get(cell, 0) + 1
    self._counts[cell] = count
    scale = self.scale
    if self._decay_steps:
      scale *= max(0.0, 1.0 - step / self._decay_steps)
    bonus = scale / math.sqrt(count)
    self._total += bonus
    self._steps += 1
    return bonus

  def summary(self) -> Dict[str, float]:
    """Cells visited so far and the mean bonus since the last summary."""
    mean = self._total / self._steps if self._steps else 0.0
    self._total, self._steps = 0.0, 0
    return {'visited_cells': len(self._counts), 'mean_bonus': mean}
