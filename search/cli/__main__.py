"""``python -m search.cli …``: the ``flysift`` command."""

from search.cli.main import main

main()
