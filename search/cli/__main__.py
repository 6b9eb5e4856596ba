"""``python -m search.cli.main``."""

from search.cli.main.main import main

main()
