"""The ``flysift`` command line."""
