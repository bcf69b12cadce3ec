"""Serves the replay, model and variable tables for one run."""
from absl import flags

from . import common
from actorq_tf import runtime
from actorq_tf import server

common.define_replay_port_flag(
    8008, 'Port the Reverb server listens on, on every interface: run it on '
    'a trusted network.')
FLAGS = flags.FLAGS


def main(_):
  common.parse_gin()
  stop = runtime.stop_on_signals()
  with server.ReplayService(FLAGS.root_dir, FLAGS.replay_port):
    stop.wait()


def run():
  common.run(main)


if __name__ == '__main__':
  run()
