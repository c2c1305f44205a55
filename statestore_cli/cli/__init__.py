"""The ``statestore`` command line (typer and rich); the library never imports this package."""
