import gc
import sys


def main() -> None:
    from statestore_cli.cli.failure import closed_pipe, finish

    try:
        # `get` of one task key on SQLite is answered before typer, rich and SQLAlchemy are imported.
        from statestore_cli.cli.fast_get import answer

        code = answer(sys.argv[1:])
        if code is not None:
            sys.exit(finish(code))
        # Start-up creates a few hundred thousand objects (SQLAlchemy, typer, the command tree) that all
        # live until exit; collecting garbage every 700 new objects cost a command ~8% of its run time
        # in full collections that free nothing. Garbage is still collected, just in larger rounds.
        gc.set_threshold(50_000)
        from statestore_cli.cli.app import app

        app(prog_name="statestore")  # also under `python -m statestore_cli`
    except BrokenPipeError:  # a closed pipe the CLI did not meet itself (shell completion's output)
        sys.exit(closed_pipe())


if __name__ == "__main__":
    main()
