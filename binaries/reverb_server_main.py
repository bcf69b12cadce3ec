"""Serves the replay, model and variable tables for one run."""
from absl import flags
from absl import logging

from binaries import common
from actorq_tf import server

flags.DEFINE_integer('port', 8008, 'Port the Reverb server listens on.')
FLAGS = flags.FLAGS


def main(_):
  common.parse_gin()
  stop = common.stop_on_signals()
  reverb_server = server.start_server(FLAGS.port)
  logging.info('Reverb server listening on port %d.', reverb_server.port)
  stop.wait()
  logging.info('Stopping the Reverb server.')
  reverb_server.stop()


def run():
  common.run(main)


if __name__ == '__main__':
  run()
