"""Serves the replay, model and variable tables for one run."""
from absl import flags

from binaries import common
from actorq_tf import runtime
from actorq_tf import server

flags.DEFINE_integer('port', 8008, 'Port the Reverb server listens on, on '
                     'every interface: run it on a trusted network.')
FLAGS = flags.FLAGS


def main(_):
  common.parse_gin()
  server.serve(FLAGS.root_dir, FLAGS.port, runtime.stop_on_signals())


def run():
  common.run(main)


if __name__ == '__main__':
  run()
