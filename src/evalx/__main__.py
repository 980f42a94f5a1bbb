"""`python -m evalx`: the `evalx` command."""

from evalx.cli import main

main(prog_name="evalx")  # `python -m evalx` reads as `evalx` in usage lines, and completes as `evalx` (_EVALX_COMPLETE)
