"""One module a `tcperf` subcommand; options every measuring command shares live in common.py."""
