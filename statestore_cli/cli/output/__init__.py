"""What the CLI prints: the output modes, safe text, tables and their column fitting, the writer of each
mode, and one view module per kind of answer. Empty on purpose: the fast ``get`` path imports a few of
these modules and nothing else."""
