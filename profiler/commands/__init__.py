"""One module per `fsprof` subcommand, each with add_arguments(parser) and main(args); cli.py
lists them with their help line. A command that changes the machine or loads BPF sets NEEDS_ROOT."""
