"""The actor: runs the newest policy in its environment and feeds replay.

env -> policy (TFLite interpreter, or stock TF for the `tf` baseline) ->
exploration in Python (the algorithm's: epsilon-greedy for DQN, Gaussian
noise for D4PG) -> trajectory -> Reverb replay. Every
`model_pull_interval` env steps, and at least every `model_pull_interval_s`
seconds, it asks for a newer model.
"""
from concurrent import futures
import time
from typing import Dict, List, Optional, Sequence

from absl import logging
import gin
import numpy as np
import tensorflow as tf
from tf_agents.policies import py_policy
from tf_agents.policies import py_tf_eager_policy
from tf_agents.policies import random_py_policy
from tf_agents.trajectories import policy_step
from tf_agents.trajectories import time_step as time_step_lib
from tf_agents.trajectories import trajectory as trajectory_lib
from tf_agents.trajectories.time_step import StepType

from actorq_tf import PRECISIONS
from actorq_tf import TFLITE_PRECISIONS
from actorq_tf import agents
from actorq_tf import environments
from actorq_tf import exploration
from actorq_tf import interpreter
from actorq_tf import metrics
from actorq_tf import model_channel
from actorq_tf import records
from actorq_tf import replay
from actorq_tf import run_directory
from actorq_tf import runtime
from actorq_tf import signing
from actorq_tf.builder import AlgorithmBuilder
from actorq_tf.errors import ActorQError
from actorq_tf.errors import SERVER_ERRORS
from actorq_tf.interpreter import TFLiteModel
from actorq_tf.interpreter import load_untrusted_model


_FIRST = np.asarray(StepType.FIRST, np.int32)
_MID = np.asarray(StepType.MID, np.int32)
_LAST = np.asarray(StepType.LAST, np.int32)
_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)
# Random-walk steps whose spread sets the novelty bonus's cells.
NOVELTY_WALK_STEPS = 2000


class TFLitePyPolicy(py_policy.PyPolicy):
  """The run's newest signed TFLite model as a greedy TF-Agents `PyPolicy`.

  It drives `tf_agents.train.Actor` or a `py_driver` as any PyPolicy does;
  `collect_policy` puts the algorithm's exploration around it. Before its
  first model it acts uniformly at random (`greedy_action` is None then),
  and counts those actions in `steps_without_model`.

  An actor of several environments gives their observations in one batch
  to `greedy_actions`; `batch_seeds` are their seeds, in that order, so that
  each breaks its int8 Q-value ties as a single actor of its seed would
  (one environment of `seed` by default).

  `update()` pulls a newer model if there is one: the row's signature is
  checked with the run key, then the model is trial-run in a child process
  and its specs compared with the environment's, on a thread, while the
  policy goes on with its current model; it is swapped in at a later
  `update` once it passed (at once with `wait=True`).
  """

  def __init__(self, env, server_address: str, key: signing.RunKey,
               precision: str = 'int8', seed: int = 0,
               server_timeout_s: float = 10.0,
               batch_seeds: Sequence[int] = ()):
    if precision not in TFLITE_PRECISIONS:
      raise ActorQError(f'unknown TFLite precision {precision!r}; expected '
                        f'one of {TFLITE_PRECISIONS}')
    interpreter.require_runtime(precision)
    self._algorithm = agents.check_environment(env)
    self._puller = model_channel.ModelPuller(
        model_channel.wait_for_server(server_address, server_timeout_s),
        precision, key)
    self._tie_break_seeds = list(batch_seeds) or [seed]
    self._observation_shape = tuple(env.observation_spec().shape)
    self._output_size = self._algorithm.policy_output_size(env)
    self._model: Optional[TFLiteModel] = None
    self._act = None  # The model's greedy actions for a batch.
    self._checks = futures.ThreadPoolExecutor(1, 'ModelCheck')
    self._pending: Optional[futures.Future] = None
    self._random = random_py_policy.RandomPyPolicy(
        env.time_step_spec(), env.action_spec(), seed=seed)
    self._action_dtype = env.action_spec().dtype
    self.steps_without_model = 0
    super().__init__(env.time_step_spec(), env.action_spec())

  @property
  def version(self) -> int:
    """The version of the model in use; 0 before the first."""
    return self._puller.version

  def refusals(self) -> Dict[str, object]:
    """What the policy refused of the rows it pulled."""
    return self._puller.refusals.status()

  def update(self, wait: bool = False) -> bool:
    """True if a newer model is now in use; keeps the current otherwise.

    Args:
      wait: wait for the check of a newly pulled model instead of taking it
        at a later call.
    """
    if self._pending is None:
      model = self._puller.pull_newer()
      if model is None:
        return False
      self._pending = self._checks.submit(self._load, model)
    if not (wait or self._pending.done()):
      return False
    published, model, error = self._pending.result()
    self._pending = None
    if model is None:
      self._puller.refuse(published, error)
      return False
    self._puller.accept(published)
    self._model = model
    self._act = self._algorithm.model_policy(model)
    return True

  def _load(self, published):
    try:
      return published, load_untrusted_model(
          published.model_bytes, published.normalizer,
          self._observation_shape, self._output_size,
          tie_break_seed=[seed + published.version
                          for seed in self._tie_break_seeds]), None
    except ActorQError as e:
      return published, None, e.message

  def greedy_actions(self, observations: np.ndarray):
    """The model's greedy actions for a batch of observations (the
    algorithm's: ints for DQN, arrays for D4PG), or None before the first
    model."""
    if self._model is None:
      return None
    return self._act(observations)

  def greedy_action(self, observation: np.ndarray):
    """The greedy action for one observation, or None before the first
    model."""
    if self._model is None:
      return None
    return self._act(observation[None])[0, ...]

  def _action(self, time_step, policy_state):
    action = self.greedy_action(time_step.observation)
    if action is None:
      self.steps_without_model += 1
      return self._random.action(time_step, policy_state)
    return policy_step.PolicyStep(
        np.asarray(action, self._action_dtype), policy_state, ())


class StockPyPolicy(py_policy.PyPolicy):
  """The stock baseline as a greedy `PyPolicy`: TF-Agents' fp32 greedy
  QPolicy or ActorPolicy run by PyTFEagerPolicy, on the variables the
  learner signs and publishes (pulled as `ReverbVariableContainer` would,
  signature checked). Acts at random before the first variables, counted in
  `steps_without_model`."""

  def __init__(self, env, server_address: str, key: signing.RunKey,
               seed: int = 0, server_timeout_s: float = 10.0):
    algorithm = agents.check_environment(env)
    policy_network = algorithm.policy_network(env)
    # The container's constructor asks the server without a timeout.
    self._client = model_channel.wait_for_server(server_address,
                                                 server_timeout_s)
    self._puller = model_channel.VariablesPuller(
        server_address, policy_network.variables, key)
    self._policy = stock_greedy_policy(env, policy_network, algorithm,
                                       batched=True)
    self._has_variables = False
    self._random = random_py_policy.RandomPyPolicy(
        env.time_step_spec(), env.action_spec(), seed=seed)
    self.steps_without_model = 0
    super().__init__(env.time_step_spec(), env.action_spec())

  @property
  def version(self) -> int:
    return self._puller.version

  def refusals(self) -> Dict[str, object]:
    return self._puller.refusals.status()

  def update(self, wait: bool = False) -> bool:
    del wait  # Variables need no check beyond their signature.
    if not self._has_variables:
      info = self._client.server_info(timeout=10)
      self._has_variables = (
          info[model_channel.VARIABLES_TABLE].current_size > 0)
      if not self._has_variables:
        return False
    return self._puller.update()

  def greedy_actions(self, observations: np.ndarray):
    if not self.version:
      return None
    # The greedy policies read only the observation.
    batch = len(observations)
    return np.asarray(self._policy.action(time_step_lib.TimeStep(
        step_type=np.full(batch, _MID), reward=np.zeros(batch, np.float32),
        discount=np.ones(batch, np.float32),
        observation=observations)).action)

  def greedy_action(self, observation: np.ndarray):
    if not self.version:
      return None
    return self.greedy_actions(observation[None])[0, ...]

  def _action(self, time_step, policy_state):
    if not self.version:
      self.steps_without_model += 1
      return self._random.action(time_step, policy_state)
    return policy_step.PolicyStep(self.greedy_action(time_step.observation),
                                  policy_state, ())


def stock_greedy_policy(env, policy_network, algorithm: AlgorithmBuilder,
                        batched: bool = False
                       ) -> py_tf_eager_policy.PyTFEagerPolicy:
  """TF-Agents' own greedy policy over `policy_network` (the algorithm's:
  QPolicy, ActorPolicy), as its examples run it, in a PyTFEagerPolicy: of
  one time step, or of a batch of them (`batched`).

  Greedy: exploration is the same Python code for every precision, so the
  precisions differ only in how the policy runs.
  """
  return py_tf_eager_policy.PyTFEagerPolicy(
      algorithm.stock_policy(env, policy_network), use_tf_function=True,
      batch_time_steps=not batched)


def greedy_policy(env, server_address: str, key: signing.RunKey,
                  precision: str = 'int8', seed: int = 0,
                  server_timeout_s: float = 10.0,
                  batch_seeds: Sequence[int] = ()):
  """The greedy policy an actor of `precision` runs: `TFLitePyPolicy` for
  int8, fp16 and fp32 models (`batch_seeds`: see there), `StockPyPolicy`
  for `tf`."""
  if precision == 'tf':
    return StockPyPolicy(env, server_address, key, seed, server_timeout_s)
  return TFLitePyPolicy(env, server_address, key, precision, seed,
                        server_timeout_s, batch_seeds)


def environment_seeds(seed: int, actor_index: int,
                      envs_per_actor: int = 1) -> List[int]:
  """The seeds of actor `actor_index`'s environments: its environment j is
  seeded, explores and breaks ties as single actor i * N + j of a run of
  N-times as many single-environment actors would (seed + 1000 * that)."""
  first = actor_index * envs_per_actor
  return [seed + 1000 * (first + j) for j in range(envs_per_actor)]


def collect_policy(env, greedy: py_policy.PyPolicy, actor_index: int = 0,
                   num_actors: int = 1, seed: int = 0, first_step: int = 0,
                   steps_without_model: int = 0, envs_per_actor: int = 1
                  ) -> exploration.ExploringPyPolicy:
  """`greedy` with the exploration of the environment's algorithm around it
  (epsilon-greedy for DQN, Gaussian noise for D4PG), spread across
  `num_actors` actors as the algorithm spreads it: an actor of
  `envs_per_actor` environments explores in each as one of that many single
  actors would (see `environment_seeds`). A restarted actor goes on from its
  counts: `first_step` (each environment's step, where the decay is) and
  `steps_without_model`."""
  algorithm = agents.check_environment(env)
  first = actor_index * envs_per_actor
  explorers = [
      algorithm.explorer(env, first + j, num_actors * envs_per_actor,
                         environment_seed)
      for j, environment_seed in enumerate(
          environment_seeds(seed, actor_index, envs_per_actor))]
  return exploration.ExploringPyPolicy(greedy, explorers, first_step,
                                       steps_without_model)


@gin.configurable
def run_actor(root_dir: str,
              server_address: str,
              precision: str = 'int8',
              actor_index: int = 0,
              num_actors: int = 1,
              seed: int = 0,
              max_env_steps: int = 0,
              model_pull_interval: int = 0,
              model_pull_interval_s: float = 5.0,
              status_interval_s: float = 5.0,
              server_timeout_s: float = runtime.SERVER_TIMEOUT_S,
              wait_for_first_model_s: float = 0.0,
              model_key_file: str = '',
              envs_per_actor: int = 1,
              should_stop=lambda: False) -> int:
  """Collects experience until `max_env_steps` (0: until stopped).

  Args:
    root_dir: run directory; summaries go to `actor_<index>/`.
    server_address: host:port of the Reverb server.
    precision: int8, fp16 or fp32 TFLite models, or `tf` for the stock
      TF-Agents policy on fp32 variables.
    actor_index: this actor's index, which sets its exploration (the
      algorithm's builder spreads it across actors) and its seed.
    num_actors: how many actors the run has (for the exploration spread).
    seed: base seed; see `environment_seeds`.
    max_env_steps: stop after this many env steps in this run (rounded up to
      a multiple of `envs_per_actor`); 0 runs until stopped.
    model_pull_interval: env steps between pulls of a newer model. 0 picks
      the default: 1 for `tf` (TF-Agents' distributed examples update
      variables after every step) and 100 for TFLite models.
    model_pull_interval_s: ... and at least this often, in seconds: an actor
      held by the replay's rate limiter (many actors beside a slow learner)
      may take seconds per env step, and would else keep an old model, or
      none, for minutes.
    status_interval_s: seconds between TensorBoard points and status files.
    server_timeout_s: how long the Reverb server may not answer before the
      actor gives up; meanwhile it keeps its environment and model.
    wait_for_first_model_s: 0 acts at random until the first model arrives
      (warm-up, counted in `steps_without_model`); more waits up to this
      long for one before the first step and fails if none is accepted
      (benchmarks measure only steps that a model chose).
    model_key_file: file of the run key that the learner signs models with
      (see `signing.run_key`); '' takes the key the launcher handed over,
      else root_dir's.
    envs_per_actor: environments this actor steps in turn, calling its
      model once for all of their observations. Each is seeded, explores
      and writes to replay as one of N single actors would (see
      `environment_seeds`), so the replay gets the same items; the env
      steps counted, and the model share, are the sum over them.
    should_stop: polled every step; SIGTERM handling sets it in binaries.

  Returns:
    The number of env steps taken by this actor, counting earlier runs of
    the same actor in `root_dir`: a restarted actor goes on counting, and
    its epsilon goes on decaying, from its last status.
  """
  if precision not in PRECISIONS:
    raise ActorQError(f'unknown precision {precision!r}; expected one of '
                      f'{PRECISIONS}')
  if envs_per_actor < 1:
    raise ActorQError(f'an actor needs at least one environment; '
                      f'envs_per_actor is {envs_per_actor}')
  model_pull_interval = model_pull_interval or (1 if precision == 'tf' else 100)
  seeds = environment_seeds(seed, actor_index, envs_per_actor)
  envs = [environments.load_environment() for _ in seeds]
  for env, env_seed in zip(envs, seeds):
    environments.seed_environment(env, env_seed)
  env = envs[0]
  algorithm = agents.check_environment(env)
  action_dtype = env.action_spec().dtype

  key = signing.run_key(root_dir, model_key_file)
  client = model_channel.wait_for_server(server_address, server_timeout_s)
  watchdog = runtime.Watchdog(
      server_timeout_s, f'waiting for the Reverb server at {server_address}')
  # The watchdog ends the process if it is not stopped: it must not outlive
  # an actor that raised in the caller's process (benchmarks, tests).
  try:
    replay.check_same_environment(client, algorithm.collect_data_spec(env))
    # One writer per environment: an item is a window of one episode's
    # steps, and Reverb's writers build windows from one stream of steps
    # (TF-Agents' observer does not take batched steps either). Their items
    # cost the same per step as a single actor's: Reverb's own Append is
    # most of it (benchmarks/results/many_environments.md).
    experience_writers = [
        replay.replay_observer(client, key, give_up_s=server_timeout_s,
                               on_server_answer=watchdog.beat)
        for _ in envs]
    policy = greedy_policy(env, server_address, key, precision, seeds[0],
                           server_timeout_s, batch_seeds=seeds)
    novelties = [exploration.CountBonus(
        lambda env_seed=env_seed: _walk_observations(env_seed))
                 for env_seed in seeds]

    role = run_directory.actor_role(actor_index)
    previous_run = (run_directory.read_status(root_dir, role) or
                    records.ActorStatus())
    steps = previous_run.env_steps
    # Env steps whose action no model chose (none had arrived yet) are
    # counted by the collect policy and shown everywhere, so that an actor
    # never acts at random unnoticed.
    collect = collect_policy(
        env, policy, actor_index, num_actors, seed,
        first_step=steps // envs_per_actor,
        steps_without_model=previous_run.steps_without_model,
        envs_per_actor=envs_per_actor)
    reporter = ActorReporter(root_dir, role, precision, policy, collect,
                             novelties, status_interval_s, previous_run)
    if steps:
      logging.info('Going on from env step %d of an earlier run of %s.', steps,
                   role)
    max_env_steps = max_env_steps and steps + max_env_steps
    episode_returns = [0.0] * len(envs)
    episode_lengths = [0] * len(envs)
    server_lost = False
    next_pull_step, next_pull_time = steps, time.monotonic()
    # Environments stepped one after the other in Python, each through
    # DirectSteps: a Gym CartPole step is about 10 us of a step that Reverb's
    # writes dominate, and MuJoCo's physics runs in C already. A batched
    # C++ pool (EnvPool) would have to reproduce these environments'
    # seeds and physics exactly for the replay to get the same items.
    steppers = [environments.DirectSteps(env) for env in envs]
    boundary_action = np.broadcast_to(
        env.action_spec().minimum, env.action_spec().shape).astype(action_dtype)
    if wait_for_first_model_s:
      _wait_for_first_model(policy, wait_for_first_model_s, watchdog)
      reporter.took_version(policy.version)

    seconds = reporter.start_loop()  # policy, env, replay: see ActorReporter
    observations = [stepper.reset() for stepper in steppers]
    # The model's input, a row per environment, updated in place (a new
    # stack at every step cost more than a small model's invoke).
    batch = np.stack(observations)
    step_types = [_FIRST] * len(envs)
    while not should_stop() and not (max_env_steps and steps >= max_env_steps):
      watchdog.beat()
      if steps >= next_pull_step or time.monotonic() >= next_pull_time:
        next_pull_step = steps + model_pull_interval
        next_pull_time = time.monotonic() + model_pull_interval_s
        pull_start = time.monotonic()
        try:
          if policy.update():
            reporter.took_version(policy.version)
          if server_lost:
            logging.info('The Reverb server answers again.')
            server_lost = False
        except SERVER_ERRORS as e:
          if not server_lost:
            logging.warning('Could not pull a model (%s); keeping version %d '
                            'and collecting.', type(e).__name__,
                            policy.version)
            server_lost = True
        reporter.pull_seconds += time.monotonic() - pull_start

      policy_start = time.perf_counter()
      env_step = collect.steps  # each environment's, before this step
      actions = collect.act_batch(batch)
      seconds['policy'] += time.perf_counter() - policy_start
      for i, stepper in enumerate(steppers):
        action = actions[i, ...]
        env_start = time.perf_counter()
        next_observation, reward, discount, last = stepper.step(action)
        replay_start = time.perf_counter()
        seconds['env'] += replay_start - env_start
        next_step_type = _LAST if last else _MID
        experience_writers[i].write(trajectory_lib.Trajectory(
            step_type=step_types[i], observation=observations[i],
            action=action, policy_info=(), next_step_type=next_step_type,
            reward=(np.float32(reward + novelties[i](next_observation,
                                                     env_step))
                    if novelties[i].enabled else reward),
            discount=discount))
        steps += 1
        episode_returns[i] += float(reward)
        episode_lengths[i] += 1
        if last:
          # The boundary step (last -> first) that TF-Agents' auto-reset
          # makes carries the episode's last observation into replay; no env
          # step and no policy call, so it is not counted as one.
          experience_writers[i].write(trajectory_lib.Trajectory(
              step_type=_LAST, observation=next_observation,
              action=boundary_action, policy_info=(), next_step_type=_FIRST,
              reward=_ZERO, discount=_ONE))
          reporter.episode_ended(episode_returns[i], episode_lengths[i])
          episode_returns[i], episode_lengths[i] = 0.0, 0
          reset_start = time.perf_counter()
          seconds['replay'] += reset_start - replay_start
          observations[i], step_types[i] = stepper.reset(), _FIRST
          seconds['env'] += time.perf_counter() - reset_start
        else:
          observations[i], step_types[i] = next_observation, _MID
          seconds['replay'] += time.perf_counter() - replay_start
        batch[i] = observations[i]

      if reporter.due():
        reporter.write(steps, _blocked_seconds(experience_writers))

    loop_seconds = reporter.loop_seconds()
    for experience_writer in experience_writers:
      experience_writer.close()
    reporter.close(steps, _blocked_seconds(experience_writers), loop_seconds)
    return steps
  finally:
    watchdog.stop()


def _blocked_seconds(experience_writers) -> float:
  return sum(writer.blocked_seconds for writer in experience_writers)


class ActorReporter:
  """What an actor shows, beside its loop: its status file and TensorBoard
  every `interval_s` seconds, and where the loop's time goes.

  The loop adds to `seconds` (policy and exploration, env steps and resets,
  replay writes; the rest of a loop's time is model pulls, status and the
  loop itself) and `pull_seconds`, and tells of versions and episodes. A
  restarted actor goes on from `previous_run`, its last status.
  """

  def __init__(self, root_dir: str, role: str, precision: str, policy,
               collect: exploration.ExploringPyPolicy,
               novelties: Sequence[exploration.CountBonus],
               interval_s: float,
               previous_run: records.ActorStatus):
    self._root_dir = root_dir
    self._role = role
    self._precision = precision
    self._policy = policy
    self._collect = collect
    self._novelties = novelties
    self._interval_s = interval_s
    self._writer = metrics.summary_writer(root_dir, role)
    self._steps = previous_run.env_steps
    self._episodes = previous_run.episodes
    # Every version it acted with, each signed by the run's learner: the
    # launcher checks them against what the learner published.
    self._versions_run = previous_run.versions_run
    self._rate = metrics.RateMeter(self._steps)
    self._recent_steps = self._steps
    self._recent_steps_without_model = collect.steps_without_model
    self._recent_returns: List[float] = []
    self._recent_lengths: List[int] = []
    self._next_time = time.monotonic()
    self._loop_start = time.monotonic()
    self.seconds = {'policy': 0.0, 'env': 0.0, 'replay': 0.0}
    self.pull_seconds = 0.0

  def start_loop(self) -> Dict[str, float]:
    """Starts the loop's clock; returns `seconds`, for the loop to add to."""
    self._loop_start = time.monotonic()
    return self.seconds

  def loop_seconds(self) -> float:
    """Seconds of this run's env loop, model pulls included: its steps/s
    without process start-up, the wait for a first model or the last
    flush."""
    return time.monotonic() - self._loop_start

  def took_version(self, version: int) -> None:
    self._versions_run.append(version)

  def episode_ended(self, episode_return: float, length: int) -> None:
    self._recent_returns.append(episode_return)
    self._recent_lengths.append(length)
    self._episodes += 1

  def due(self) -> bool:
    return time.monotonic() >= self._next_time

  def _status(self, steps: int, loop_seconds: float,
              **interval) -> records.ActorStatus:
    steps_without_model = self._collect.steps_without_model
    share = (1.0 - steps_without_model / steps) if steps else 0.0
    interval_steps = steps - self._recent_steps
    recent_share = (1.0 - (steps_without_model -
                           self._recent_steps_without_model) /
                    interval_steps) if interval_steps else share
    time_share = {name: value / max(loop_seconds, 1e-9)
                  for name, value in self.seconds.items()}
    time_share['other'] = max(0.0, 1.0 - sum(time_share.values()))
    return records.ActorStatus(
        env_steps=steps, episodes=self._episodes,
        environments=self._collect.environments, time_share=time_share,
        model_version=self._policy.version, versions_run=self._versions_run,
        precision=self._precision, steps_without_model=steps_without_model,
        interpreter=(interpreter.runtime_name()
                     if self._precision in TFLITE_PRECISIONS else ''),
        model_share=share, recent_model_share=recent_share,
        loop_seconds=loop_seconds, model_pull_seconds=self.pull_seconds,
        **self._policy.refusals(), **interval)

  def write(self, steps: int, replay_blocked_seconds: float) -> None:
    """The status file and TensorBoard points of the last interval."""
    rate = self._rate.rate(steps)
    mean_return = (float(np.mean(self._recent_returns))
                   if self._recent_returns else None)
    novelty = metrics.mean_figures([bonus.summary() for bonus in
                                    self._novelties if bonus.enabled])
    status = self._status(
        steps, self.loop_seconds(), env_steps_per_second=rate,
        episode_return=mean_return,
        replay_blocked_seconds=replay_blocked_seconds, novelty=novelty)
    with self._writer.as_default(step=steps):
      tf.summary.scalar('actor/env_steps_per_second', rate)
      tf.summary.scalar('actor/model_version', self._policy.version)
      tf.summary.scalar('actor/model_pull_seconds', self.pull_seconds)
      tf.summary.scalar('actor/model_share', status.recent_model_share)
      if status.interpreter:
        tf.summary.scalar('actor/interpreter_is_litert', float(
            status.interpreter.startswith(interpreter.LITERT)))
      tf.summary.scalar('actor/refused_versions', status.refused_versions)
      for name, share in status.time_share.items():
        tf.summary.scalar(f'actor/time_share/{name}', share)
      if status.last_refusal:
        tf.summary.text('actor/last_refusal', status.last_refusal)
      for name, value in self._collect.summary().items():
        tf.summary.scalar(f'actor/{name}', value)
      for name, value in novelty.items():
        tf.summary.scalar(f'actor/novelty/{name}', value)
      if mean_return is not None:
        tf.summary.scalar('actor/episode_return', mean_return)
        tf.summary.scalar('actor/episode_length',
                          np.mean(self._recent_lengths))
    run_directory.write_status(self._root_dir, self._role, status)
    self._recent_steps = steps
    self._recent_steps_without_model = self._collect.steps_without_model
    self._recent_returns, self._recent_lengths = [], []
    self._next_time = time.monotonic() + self._interval_s

  def close(self, steps: int, replay_blocked_seconds: float,
            loop_seconds: float) -> None:
    """The last status, marked stopped."""
    self._writer.close()
    run_directory.write_status(self._root_dir, self._role, self._status(
        steps, loop_seconds, stopped=True,
        replay_blocked_seconds=replay_blocked_seconds))


def _walk_observations(seed: int) -> np.ndarray:
  """A random walk's observations, in an environment of its own: the
  actor's episodes keep their seeds."""
  env = environments.load_environment()
  try:
    return environments.random_walk_observations(env, NOVELTY_WALK_STEPS,
                                                 seed=seed)
  finally:
    env.close()


def _wait_for_first_model(policy, timeout_s: float,
                          watchdog: runtime.Watchdog) -> None:
  deadline = time.monotonic() + timeout_s
  while not policy.update(wait=True):
    watchdog.beat()
    if time.monotonic() >= deadline:
      refusals = policy.refusals()
      raise ActorQError(
          f'no model was accepted within {timeout_s:g} s (refused '
          f'{refusals["refused_versions"]}; last: '
          f'{refusals["last_refusal"] or "none"})')
    time.sleep(0.2)
