import sys


def main() -> None:
    # `get` of one task key on SQLite is answered before typer, rich and SQLAlchemy are imported.
    from statestore_cli.cli.fast_get import answer

    code = answer(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from statestore_cli.cli.app import app

    app()


if __name__ == "__main__":
    main()
