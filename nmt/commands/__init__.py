"""One module per `nmt` command (nmt/cli.py's table): `add_arguments`, which declares its flags with the
shared ones of arguments.py, and `run`, which turns them into one call of the library. A command module
imports the library inside `run`, so that `nmt COMMAND --help` loads no torch."""
