"""The question every deleting command asks before it deletes, and how it counts what it deletes."""

import shutil
import sys

from statestore_cli.errors import InterruptedByUser, InvalidInputError, NotConfirmedError


def confirm_delete(yes: bool, action: str, question: str, nothing: str = "nothing deleted") -> None:
    """The confirmation rule of every deleting command: --yes, or y/yes typed at a terminal. ``nothing``:
    what an answer of no leaves undone (a copy that would overwrite: nothing copied)."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise InvalidInputError(f"{action} and stdin is not a terminal to confirm on; pass --yes")
    if not confirm(f"{question} [y/N] ", nothing):
        raise NotConfirmedError(f"{nothing} (answered no)")


def confirm(question: str, nothing: str = "nothing deleted") -> bool:
    """Ask ``question`` on the terminal (stderr, so stdout keeps only results): only y or yes confirms.
    Ctrl-C and end of input (Ctrl-D) end the command with their own error, on a line of their own."""
    from statestore_cli.cli.output.grid import wrap  # the table layer: only a question at a terminal needs it

    sys.stdout.flush()
    # Broken between words at the terminal's width: the terminal would cut an asset's or a task's name in two.
    width = shutil.get_terminal_size().columns
    question = "\n".join(wrap(question.rstrip(" ").split(" "), width - 1)) + " "
    try:  # from before the question shows: a Ctrl-C typed as soon as it appears lands here too
        sys.stderr.write(question)
        sys.stderr.flush()
        answer = sys.stdin.readline()
    except KeyboardInterrupt:
        sys.stderr.write("\n")  # the terminal shows ^C after the question: the error goes below it
        raise InterruptedByUser(f"interrupted at the question; {nothing}") from None
    if not answer:  # end of input: no line was typed, so the cursor is still after the question
        sys.stderr.write("\n")
        raise NotConfirmedError(f"{nothing} (no answer: end of input)")
    return answer.strip().lower() in ("y", "yes")


def key_count(count: int) -> str:
    """``1 key``, ``1,000 keys``: how questions and their answers count keys."""
    return f"{count:,} key{'s' if count != 1 else ''}"
