"""What signing costs per model update, at the size of the policy the gin
config builds (ActorQ's paper size below), beside what the update costs
anyway.

For each exported precision and for the fp32 variables (`tf` actors and the
evaluator): the learner's HMAC-SHA256 per row, an actor's verification, and
the same row's trip through a local Reverb server (insert by the learner,
sample by an actor) and its conversion, measured in one process through the
learner's and actors' own code (`ModelPublisher`, `ModelPuller`,
`VariablesPuller`).

  .venv/bin/python -m benchmarks.signing_cost --env_steps 3000 \\
      --gin_file d4pg_walker_stand.gin \\
      --gin_bindings 'create_actor_network.fc_layer_params = (2048, 2048, 2048)'
"""
import collections
import os
import tempfile
import time

from absl import app
from absl import flags
import numpy as np
import reverb
import tensorflow as tf

from actorq_tf import agents
from actorq_tf import config
from actorq_tf import environments
from actorq_tf import export
from actorq_tf import model_channel
from actorq_tf import server
from actorq_tf import signing
from benchmarks import actor_throughput
from benchmarks import common

# Its flags are actor_throughput's (--gin_file, default dqn_cartpole.gin;
# --env_steps of the int8 actor; --repeats), whose helpers it runs.
FLAGS = flags.FLAGS


def _median_seconds(call, repeats: int) -> float:
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    call()
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def measure(repeats: int, actor_steps: int) -> dict:
  env = environments.load_environment()
  algorithm = agents.check_environment(env)
  policy_network = algorithm.policy_network(env)
  observations = environments.random_walk_observations(env, 256)
  key = signing.RunKey(os.urandom(32), 'benchmark')
  with tempfile.TemporaryDirectory() as model_dir:
    exporter = export.PolicyExporter(
        policy_network, algorithm.model_outputs(env), ['int8', 'fp32'],
        lambda *_: None, model_dir)
    results = exporter.export(1, observations)
  weights = policy_network.get_weights()
  reverb_server = reverb.Server(server.create_tables(env), port=None)
  address = f'localhost:{reverb_server.port}'
  figures = {'network_params': int(policy_network.count_params())}
  try:
    client = model_channel.wait_for_server(address, 10)
    publisher = model_channel.ModelPublisher(client, key)
    for result in results:
      model = model_channel.PublishedModel(
          result.version, result.precision, result.model_bytes,
          result.normalizer)
      signed = model.signed(key)
      assert signed.signed_by(key)  # What the actor checks, and passes.
      puller = model_channel.ModelPuller(client, result.precision, key)

      def pull(puller=puller):
        puller.forget_sample()
        puller.version = 0
        pulled = puller.pull_newer()
        assert pulled is not None and pulled.signature == signed.signature

      figures[result.precision] = {
          'bytes': len(result.model_bytes),
          'convert_s': result.convert_seconds,
          'sign_s': _median_seconds(lambda m=model: m.signed(key), repeats),
          'verify_s': _median_seconds(lambda s=signed: s.signed_by(key),
                                      repeats),
          'publish_s': _median_seconds(lambda m=model: publisher.publish(m),
                                       repeats),
          'pull_s': _median_seconds(pull, repeats),
      }
    parts = model_channel.variables_signed_parts(1, weights)
    variables = [v for v in policy_network.variables]
    variables_puller = model_channel.VariablesPuller(address, variables, key)
    versions = iter(range(1, 10 * repeats + 10))

    def publish_variables():
      publish_variables.version = next(versions)
      publisher.publish_variables(weights, publish_variables.version)

    def pull_variables():
      assert variables_puller.update()  # A newer signed version: verified.

    publish_s = _median_seconds(publish_variables, repeats)
    pull_times = []
    for _ in range(repeats):
      publish_variables()
      pull_times.append(_median_seconds(pull_variables, 1))
    figures['variables'] = {
        'bytes': int(sum(w.nbytes for w in weights)),
        'sign_s': _median_seconds(lambda: key.sign(parts), repeats),
        'verify_s': _median_seconds(
            lambda: key.verifies(key.sign(parts), parts), repeats) / 2,
        'publish_s': publish_s,
        'pull_and_verify_s': float(np.median(pull_times)),
    }
  finally:
    reverb_server.stop()
  figures['replay_item'] = _replay_item_signing(algorithm, env, key,
                                                actor_steps)
  return figures


def _replay_item_signing(algorithm, env, key: signing.RunKey,
                         actor_steps: int) -> dict:
  """What signing each replay item would cost an actor (replay is not
  signed), beside the actor's own step time measured in this run: the HMAC
  of one item's steps (the collect spec's bytes, as `tobytes` gives them) for
  every env step, against an int8 actor's env steps/s
  (`benchmarks.actor_throughput`'s measurement, its model's steps only)."""
  spec = tf.nest.flatten(algorithm.collect_data_spec(env))
  length = algorithm.sequence_length()
  rng = np.random.default_rng(0)
  steps = [[rng.random(s.shape).astype(s.dtype.as_numpy_dtype)
            for s in spec] for _ in range(length)]
  calls = 2000
  start = time.perf_counter()
  for _ in range(calls):
    key.sign([array.tobytes() for step in steps for array in step])
  sign_s = (time.perf_counter() - start) / calls
  # As a writer would do it: each step's bytes made once, when it comes,
  # and each item's HMAC over the newest `length` of them.
  window = collections.deque(maxlen=length)
  start = time.perf_counter()
  for i in range(calls):
    window.append(b''.join(array.tobytes() for array in steps[i % length]))
    key.sign(window)
  sign_cached_s = (time.perf_counter() - start) / calls
  reverb_server = reverb.Server(actor_throughput.unthrottled_tables(env),
                                port=None)
  try:
    key_dir = tempfile.mkdtemp()
    key_file = os.path.join(key_dir, signing.KEY_FILE)
    signing.run_key(key_dir)
    address = f'localhost:{reverb_server.port}'
    actor_throughput.publish_all_precisions(address, env, key_file)
    rate, _ = actor_throughput.actor_rate(address, 'int8', actor_steps, 100,
                                          key_file)
  finally:
    reverb_server.stop()
  return {'bytes': sum(a.nbytes for step in steps for a in step),
          'steps': length, 'sign_s': sign_s, 'sign_cached_s': sign_cached_s,
          'int8_actor_env_steps_per_second': rate,
          'share_of_int8_actor_step': sign_s * rate,
          'share_of_int8_actor_step_cached': sign_cached_s * rate}


def print_table(figures: dict) -> None:
  print(f'policy network: {figures["network_params"]:,} parameters')
  print('| row | bytes | sign (learner) | verify (actor) | publish | pull | '
        'convert | sign+verify / (publish+pull) |')
  print('| --- | --- | --- | --- | --- | --- | --- | --- |')
  for row in ('int8', 'fp32', 'variables'):
    f = figures[row]
    pull = f.get('pull_s', f.get('pull_and_verify_s'))
    share = (f['sign_s'] + f['verify_s']) / (f['publish_s'] + pull)
    convert = f'{f["convert_s"]:.2f} s' if 'convert_s' in f else '-'
    print(f'| {row} | {f["bytes"]:,} | {f["sign_s"] * 1e3:.1f} ms | '
          f'{f["verify_s"] * 1e3:.1f} ms | {f["publish_s"] * 1e3:.1f} ms | '
          f'{pull * 1e3:.1f} ms{" (verify included)" if "pull_and_verify_s" in f else ""} | '
          f'{convert} | {share:.2f} |')
  item = figures['replay_item']
  print(f'replay item ({item["steps"]} steps, {item["bytes"]:,} bytes), '
        'signed at every env step (not done: replay is not signed): '
        f'{item["sign_s"] * 1e6:.1f} us making every step\'s bytes anew, '
        f'{item["sign_cached_s"] * 1e6:.1f} us with each step\'s bytes made '
        f'once; {item["share_of_int8_actor_step"]:.1%} and '
        f'{item["share_of_int8_actor_step_cached"]:.1%} of an int8 actor\'s '
        f'step ({item["int8_actor_env_steps_per_second"]:,.0f} env steps/s, '
        'measured in this run)')


def main(_):
  config.parse_gin(FLAGS.gin_file, FLAGS.gin_bindings)
  figures = measure(FLAGS.repeats, FLAGS.env_steps)
  print_table(figures)
  if FLAGS.output_json:
    common.write_json(FLAGS.output_json, figures)


if __name__ == '__main__':
  app.run(main)
