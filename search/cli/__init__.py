"""The ``flysift`` command line: the root group and the read-side commands (``main``), ``admin``, ``terms`` and
``mcp``; the indexer's and eval's commands register through the ``flysift.commands`` entry points.

Other packages' commands share the options of ``search.cli.options`` (re-exported here).
"""

from search.cli.options import data_dir_option, print_table, settings_for

__all__ = ["data_dir_option", "print_table", "settings_for"]
