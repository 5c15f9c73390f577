"""The `ridgefill` command line: one parser (`commands.build_parser`), thin handlers per command group
(`models`, `fit`, `bench`, `eval`, `tune`), and `gpu`, bench/gpu.sh's entry point.

Handlers parse and print; the work is in the subpackages. `args` holds the argument types every
entry point shares. Importing this package loads no command group: `gpu` must run where the
compiled bindings do not exist.
"""


def main(argv: list[str] | None = None) -> int:
    from .commands import main as run

    return run(argv)
