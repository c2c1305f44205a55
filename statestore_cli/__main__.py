import gc
import io
import sys


def main() -> None:
    from statestore_cli.cli.failure import closed_pipe, finish

    _whole_writes()
    try:
        # `get` of one task key on SQLite is answered before typer, rich and SQLAlchemy are imported.
        from statestore_cli.cli.fast_get import answer

        code = answer(sys.argv[1:])
        if code is not None:
            sys.exit(finish(code))
        # Start-up creates a few hundred thousand objects (SQLAlchemy, typer, the command tree) that all
        # live until exit; collecting garbage every 700 new objects would run full collections over them
        # that free nothing. Garbage is still collected, just in larger rounds.
        gc.set_threshold(50_000)
        from statestore_cli.cli.root_command import app_for

        app_for(sys.argv[1:])(prog_name="statestore")  # also under `python -m statestore_cli`
    except BrokenPipeError:  # a closed pipe the CLI did not meet itself (shell completion's output)
        sys.exit(closed_pipe())


def _whole_writes() -> None:
    """Under PYTHONUNBUFFERED (``python -u``, set in many container images) stdout's text layer writes straight
    to the file descriptor and ignores a write the kernel takes only in part (a pipe whose reader has gone, a
    disk that fills up): the rest of the output is lost without an error, and an export would still report
    every key. A buffered layer writes the rest or raises; with line buffering output is as prompt as before."""
    out = sys.stdout
    if out is not None and isinstance(getattr(out, "buffer", None), io.RawIOBase):
        out.flush()
        raw = io.FileIO(out.fileno(), "w", closefd=False)  # the old layer keeps, and closes, the descriptor
        sys.stdout = io.TextIOWrapper(
            io.BufferedWriter(raw), encoding=out.encoding, errors=out.errors, line_buffering=True
        )


if __name__ == "__main__":
    main()
